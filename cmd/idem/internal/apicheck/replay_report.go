package apicheck

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// WriteReplayProgress writes one progress line.
func WriteReplayProgress(w io.Writer, p Progress) {
	fmt.Fprintf(w, "  sent %d/%d: %s\n", p.Done, p.Total, answerSummary(p.Answers))
}

func answerSummary(m map[string]int) string {
	parts := make([]string, 0, 4)
	for _, k := range []string{AnswerReplayed, AnswerExecuted, AnswerRefused, AnswerFailed} {
		parts = append(parts, fmt.Sprintf("%d %s", m[k], k))
	}
	return strings.Join(parts, ", ")
}

// WriteReplayText writes the findings and the summary of a replay.
//
// Every string that comes from the recording or the target (methods,
// paths, keys, bodies, errors) is written through TermSafe: a control
// character or an escape sequence in a recording never reaches the
// terminal as such.
func WriteReplayText(w io.Writer, rep *ReplayReport) {
	for _, op := range rep.Operations {
		switch {
		case op.Duplicate:
			fmt.Fprintf(w, "  DUPLICATE  %s %s key %s (caller %s): %d effects from %s (%s)\n",
				TermSafe(op.Method), TermSafe(op.Path), TermSafe(op.Key), TermSafe(op.Scope), op.Effects, Plural(op.Sent, "request"), answerSummary(op.Answers))
			for _, e := range op.Requests {
				fmt.Fprintf(w, "             → %s\n", TermSafe(evidenceLine(e)))
			}
		case op.Error != "":
			fmt.Fprintf(w, "  ERROR      %s %s key %s: %s\n", TermSafe(op.Method), TermSafe(op.Path), TermSafe(op.Key), TermSafe(op.Error))
		}
	}
	fmt.Fprintf(w, "%s (%s × %d copies) against %s, effects by %s: %d with more than one effect; answers: %s; %s in %.1fs\n",
		Plural(len(rep.Operations), "operation"), Plural(rep.Records, "record"), rep.Copies, TermSafe(rep.Target), TermSafe(rep.Oracle),
		rep.Duplicates, answerSummary(rep.Answers), Plural(int(rep.Requests), "request"), float64(rep.Millis)/1000)
}

func evidenceLine(e Evidence) string {
	if e.Error != "" {
		return fmt.Sprintf("error %s (%s)", e.Error, e.Timing)
	}
	body := strings.TrimSpace(e.Body)
	if len(body) > 80 {
		body = body[:80] + "…"
	}
	marker := ""
	for k, v := range e.Headers {
		if strings.Contains(strings.ToLower(k), "replay") {
			marker = "  " + k + ": " + v
		}
	}
	return fmt.Sprintf("%d%s  %s", e.Status, marker, body)
}

// WriteReplayJSON writes the report as JSON, for CI.
func WriteReplayJSON(w io.Writer, rep *ReplayReport) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteReplayHTML writes the report as one self-contained page in the
// style of the check report: no script, no network, the chart inline SVG.
func WriteReplayHTML(w io.Writer, rep *ReplayReport) error {
	type bar struct{ Kind, N, X, W, Colour string }
	total := 0
	for _, n := range rep.Answers {
		total += n
	}
	colours := map[string]string{AnswerReplayed: "#17692e", AnswerExecuted: "#1f5fa8", AnswerRefused: "#b26a00", AnswerFailed: "#b00020"}
	var bars []bar
	x := 0.0
	for _, k := range []string{AnswerReplayed, AnswerExecuted, AnswerRefused, AnswerFailed} {
		n := rep.Answers[k]
		if n == 0 || total == 0 {
			continue
		}
		wd := 600 * float64(n) / float64(total)
		bars = append(bars, bar{k, fmt.Sprint(n), fmt.Sprintf("%.1f", x), fmt.Sprintf("%.1f", wd), colours[k]})
		x += wd
	}
	return replayPage.Execute(w, map[string]any{"R": rep, "Bars": bars, "Summary": answerSummary(rep.Answers)})
}

var replayPage = template.Must(template.New("replay").Funcs(template.FuncMap{
	"answers": answerSummary,
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>idem replay: {{.R.Target}}</title>
<style>
` + reportCSS + `.dup{background:#b00020}.ok{background:#17692e}.err{background:#757575}
</style></head><body>
<h1>idem replay</h1>
<p><b>{{.R.Target}}</b> — {{.R.Records}} recorded requests × {{.R.Copies}} copies, shuffled; effects counted by {{.R.Oracle}}.<br>
<small>{{.R.Started.Format "2006-01-02 15:04:05 MST"}} · {{.R.Requests}} requests · {{.R.Millis}} ms</small></p>
<p id="verdict" data-duplicates="{{.R.Duplicates}}">{{if .R.Duplicates}}<span class="st dup">{{.R.Duplicates}} of {{len .R.Operations}} operations had more than one effect</span>{{else}}<span class="st ok">0 duplicate effects in {{len .R.Operations}} operations</span>{{end}}</p>
<p>Answers: {{.Summary}}</p>
<svg id="answers" width="600" height="34" viewBox="0 0 600 34" role="img" aria-label="answers">
{{range .Bars}}<g class="bar" data-kind="{{.Kind}}"><rect x="{{.X}}" y="0" width="{{.W}}" height="34" fill="{{.Colour}}"></rect><text x="{{.X}}" dx="6" y="22" fill="#fff">{{.N}} {{.Kind}}</text></g>
{{end}}</svg>
<table id="operations"><tr><th>verdict</th><th>operation</th><th>effects</th><th>answers</th></tr>
{{range .R.Operations}}<tr class="operation" data-key="{{.Key}}" data-duplicate="{{.Duplicate}}" data-effects="{{.Effects}}"><td>{{if .Duplicate}}<span class="st dup">DUPLICATE</span>{{else if .Error}}<span class="st err">ERROR</span>{{else}}<span class="st ok">OK</span>{{end}}</td>
<td><code>{{.Method}} {{.Path}}</code><br>key <code>{{.Key}}</code> <small>caller {{.Scope}} · {{.Recorded}} recorded, {{.Sent}} sent</small></td>
<td>{{.Effects}}{{if .Error}}<br><small>{{.Error}}</small>{{end}}</td><td>{{answers .Answers}}
{{if .Requests}}<details><summary>requests ({{len .Requests}})</summary>{{range .Requests}}<pre>{{.Request}}
→ {{if .Error}}error: {{.Error}}{{if .Timing}} ({{.Timing}}){{end}}{{else}}{{.Status}}{{range $k, $v := .Headers}}  {{$k}}: {{$v}}{{end}} ({{.Millis}} ms)
{{.Body}}{{end}}</pre>{{end}}</details>{{end}}</td></tr>
{{end}}</table>
</body></html>
`))

// TermSafe returns s with every control character (C0, DEL, C1, and the
// Unicode format characters that reorder text, such as U+202E) written as
// a Go escape (\x07, \u202e), and invalid UTF-8 as \ufffd: printable text
// only, whatever a recording or an answer holds.
func TermSafe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == utf8.RuneError:
			b.WriteString(`\ufffd`)
		case r < 0x80 && unicode.IsControl(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Cf, r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
