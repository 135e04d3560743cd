package apicheck

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"strings"
)

// WriteLine writes one result as a table row.
func WriteLine(w io.Writer, res Result) {
	fmt.Fprintf(w, "  %-4s  %-16s %s: %s\n", res.Status, res.ID, res.Title, res.Detail)
}

// WriteText writes the report's header, rows and summary.
func WriteText(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "idem check %s — %s, effects by %s\n", rep.Target, rep.Endpoint, rep.Oracle)
	for _, res := range rep.Results {
		WriteLine(w, res)
	}
	WriteSummary(w, rep)
}

// WriteSummary writes the last line: the counts and the requests sent.
func WriteSummary(w io.Writer, rep *Report) {
	fmt.Fprintf(w, "%s: %d pass, %d warn, %d fail, %d skipped%s; %s in %.1fs\n",
		Plural(len(rep.Results), "check"), rep.Counts[Pass], rep.Counts[Warn], rep.Counts[Fail], rep.Counts[Skip],
		skipFlags(rep.Results), Plural(int(rep.Requests), "request"), float64(rep.Millis)/1000)
}

// Plural is "1 check", "2 checks".
func Plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// skipFlags lists the flags that would enable the skipped checks.
func skipFlags(rs []Result) string {
	var flags []string
	seen := map[string]bool{}
	for _, r := range rs {
		if r.Status == Skip && r.Enable != "" && !seen[r.Enable] {
			seen[r.Enable] = true
			flags = append(flags, r.Enable)
		}
	}
	if len(flags) == 0 {
		return ""
	}
	return " (enable with " + strings.Join(flags, ", ") + ")"
}

// WriteJSON writes the report as JSON, for CI.
func WriteJSON(w io.Writer, rep *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteHTML writes the report as one self-contained page in the style of
// idem demo's report: no script, no network, the chart in inline SVG.
func WriteHTML(w io.Writer, rep *Report) error {
	type bar struct {
		Status          Status
		N, X, W, Colour string
	}
	total := len(rep.Results)
	var bars []bar
	x := 0.0
	for _, st := range []Status{Pass, Warn, Fail, Skip} {
		n := rep.Counts[st]
		if n == 0 || total == 0 {
			continue
		}
		wd := 600 * float64(n) / float64(total)
		bars = append(bars, bar{st, fmt.Sprint(n), fmt.Sprintf("%.1f", x), fmt.Sprintf("%.1f", wd), colour(st)})
		x += wd
	}
	return reportPage.Execute(w, map[string]any{"R": rep, "Bars": bars})
}

func colour(st Status) string {
	switch st {
	case Pass:
		return "#17692e"
	case Warn:
		return "#b26a00"
	case Fail:
		return "#b00020"
	}
	return "#757575"
}

// reportCSS is the style of both reports (idem check and idem replay).
const reportCSS = `body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}
h1{font-size:1.5em} table{border-collapse:collapse;width:100%}
svg text{font-size:12px;font-family:system-ui,sans-serif}
td,th{border-bottom:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top}
.st{font-weight:700;color:#fff;border-radius:3px;padding:0 .4em}
.pass{background:#17692e}.warn{background:#b26a00}.fail{background:#b00020}.skip{background:#757575}
code,pre{font:12px/1.4 ui-monospace,monospace} pre{white-space:pre-wrap;margin:.2em 0;background:#f6f6f6;padding:.3em}
small{color:#666}
`

var reportPage = template.Must(template.New("report").Funcs(template.FuncMap{
	"colour": colour,
	"lower":  func(s Status) string { return strings.ToLower(string(s)) },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>idem check: {{.R.Target}}</title>
<style>
` + reportCSS + `</style></head><body>
<h1>idem check</h1>
<p><b>{{.R.Target}}</b> — <code>{{.R.Endpoint}}</code>, effects counted by {{.R.Oracle}}.<br>
<small>{{.R.Started.Format "2006-01-02 15:04:05 MST"}} · {{.R.Requests}} requests · {{.R.Millis}} ms</small></p>
<svg id="summary" width="600" height="34" viewBox="0 0 600 34" role="img" aria-label="verdicts">
{{range .Bars}}<g class="bar" data-status="{{.Status}}"><rect x="{{.X}}" y="0" width="{{.W}}" height="34" fill="{{.Colour}}"></rect><text x="{{.X}}" dx="6" y="22" fill="#fff">{{.N}} {{.Status}}</text></g>
{{end}}</svg>
<table id="results"><tr><th>verdict</th><th>check</th><th>what was found</th><th>reference</th></tr>
{{range .R.Results}}<tr class="result" data-id="{{.ID}}" data-status="{{.Status}}"><td><span class="st {{lower .Status}}">{{.Status}}</span></td>
<td><b>{{.ID}}</b><br>{{.Title}}</td><td>{{.Detail}}{{if .Enable}} <small>(enable with <code>{{.Enable}}</code>)</small>{{end}}
{{if .Evidence}}<details><summary>evidence ({{len .Evidence}})</summary>{{range .Evidence}}<pre>{{.Request}}
→ {{if .Error}}error: {{.Error}}{{if .Timing}} ({{.Timing}}){{end}}{{else}}{{.Status}}{{range $k, $v := .Headers}}  {{$k}}: {{$v}}{{end}} ({{.Millis}} ms)
{{.Body}}{{end}}</pre>{{end}}</details>{{end}}</td><td><small>{{.Reference}}</small></td></tr>
{{end}}</table>
</body></html>
`))
