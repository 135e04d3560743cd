package shop

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/idemkit/idem/fsm"
)

// WriteText prints a storm's report for a terminal.
func WriteText(w io.Writer, r *Result) {
	fmt.Fprintf(w, "\nStorm: %s shop on %s, %d orders, %d HTTP requests, %d database statements, %v\n",
		r.Name, r.Backends, r.Orders, r.Requests, r.Statements, r.Duration.Round(1e6))
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nThrown at the shop\tcount\t")
	for _, l := range r.Storm {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", l.Name, l.Count, l.What)
	}
	fmt.Fprintln(tw, "\nDuplicates absorbed, per layer\tcount\t")
	for _, l := range r.Layers {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", l.Name, l.Count, l.What)
	}
	fmt.Fprintln(tw, "\nOther defences\tcount\t")
	for _, l := range r.Defences {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", l.Name, l.Count, l.What)
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "\nConsumer: %d processed, %d inbox duplicates, %d failures rolled back, %d SIGKILLs between commit and ack, %d restarts\n",
		r.Consumer.Processed, r.Consumer.Duplicates, r.Consumer.Failed, r.Consumer.Kills, r.Consumer.Restarts)
	if r.ConsumerError != "" {
		fmt.Fprintf(w, "Consumer failure: %s\n", r.ConsumerError)
	}
	fmt.Fprintf(w, "Relay (package outbox): %d messages, %d sent, %d publishes confirmed, %d SIGKILLs between the broker's confirm and the mark, %d restarts\n",
		r.Relay.Messages, r.Relay.Sent, r.Relay.Published, r.Relay.Kills, r.Relay.Restarts)
	if r.RelayError != "" {
		fmt.Fprintf(w, "Relay failure: %s\n", r.RelayError)
	}
	fmt.Fprintf(w, "Reconciliation: %d differences found and compensated during the storm, %d left at the end\n", len(r.Found), len(r.Remaining))
	fmt.Fprintf(w, "Orders: %d acknowledged, %d refused, %d out of stock\n", r.Acked, r.Refused, r.OutOfStock)
	fmt.Fprintln(w, "\nInvariants (database and channel ledger):")
	for _, inv := range invariantNames {
		v := findViolation(r, inv)
		if v == nil {
			fmt.Fprintf(w, "  ok    %s\n", inv)
			continue
		}
		fmt.Fprintf(w, "  FAIL  %s: %d (e.g. %s)\n", inv, v.Count, strings.Join(v.Examples, "; "))
	}
	for _, v := range r.Violations {
		if !known(v.Kind) {
			fmt.Fprintf(w, "  FAIL  %s: %d (e.g. %s)\n", v.Kind, v.Count, strings.Join(v.Examples, "; "))
		}
	}
	if r.OK() {
		fmt.Fprintln(w, "\nZero violations.")
	} else {
		fmt.Fprintf(w, "\n%d kinds of violation.\n", len(r.Violations))
	}
}

var invariantNames = []string{
	"acknowledged orders lost", "acks disagree", "duplicate orders", "orders charged twice", "duplicate payments",
	"duplicate shipments", "unpaid orders shipped", "shipments lost", "refunds over the paid amount",
	"stock units lost", "orders refused", "reconciliation differences",
}

func known(kind string) bool {
	for _, k := range invariantNames {
		if k == kind {
			return true
		}
	}
	return false
}

func findViolation(r *Result, kind string) *Violation {
	for i := range r.Violations {
		if r.Violations[i].Kind == kind {
			return &r.Violations[i]
		}
	}
	return nil
}

// WriteCompareText prints the anti-patterns next to the disciplined shop.
func WriteCompareText(w io.Writer, c *Comparison) {
	fmt.Fprintf(w, "\nAnti-patterns, each breaking one rule, same storm (%d orders each unless said):\n", c.Baseline.Orders)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  variant\trule broken\tdamage\tdisciplined\tvariant\t")
	for _, r := range c.Variants {
		var base int64
		for _, v := range c.Baseline.Violations {
			if v.Kind == r.Variant.Damage() {
				base = v.Count
			}
		}
		damage := fmt.Sprint(r.Damage())
		if r.Orders != c.Baseline.Orders {
			damage += fmt.Sprintf(" (of %d orders)", r.Orders)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\t\n", r.Name, r.Variant.Rule(), r.Variant.Damage(), base, damage)
	}
	_ = tw.Flush()
	f := c.Flood
	fmt.Fprintf(w, "\nFlood of %d duplicates of one order: %d database statements with the %s fast path, %d without (%.1f%% stopped before the database)\n",
		f.Duplicates, f.WithFast, f.FastName, f.WithoutFast, 100*f.Stopped())
}

// Report is what the HTML page shows.
type Report struct {
	Storm   *Result
	Compare *Comparison // optional
	Machine fsm.Definition
}

type bar struct {
	Label, Key, Title string
	Count             int64
	Y, W              float64
}

type node struct {
	Name       string
	X, Y, W, H float64
}

type edge struct {
	Label                  string
	X1, Y1, X2, Y2, LX, LY float64
}

func bars(items []LayerCount) ([]bar, float64) {
	var maxc int64 = 1
	for _, l := range items {
		maxc = max(maxc, l.Count)
	}
	var out []bar
	for i, l := range items {
		out = append(out, bar{Label: l.Name, Key: l.Name, Title: l.What, Count: l.Count, Y: float64(i*34 + 10), W: 420 * float64(l.Count) / float64(maxc)})
	}
	return out, float64(len(items)*34 + 20)
}

// diagram lays the machine out: one column per rank (longest path from the
// initial state), states of a rank stacked.
func diagram(def fsm.Definition) ([]node, []edge, float64, float64) {
	rank := map[string]int{def.Initial: 0}
	for changed := true; changed; {
		changed = false
		for _, t := range def.Transitions {
			for _, f := range t.From {
				if r, ok := rank[f]; ok && rank[t.To] < r+1 {
					rank[t.To] = r + 1
					changed = true
				}
			}
		}
	}
	rows := map[int]int{}
	pos := map[string]node{}
	var nodes []node
	maxRank, maxRow := 0, 0
	for _, s := range def.States {
		r := rank[s]
		n := node{Name: s, X: float64(20 + r*220), Y: float64(30 + rows[r]*110), W: 120, H: 40}
		rows[r]++
		maxRank, maxRow = max(maxRank, r), max(maxRow, rows[r])
		pos[s] = n
		nodes = append(nodes, n)
	}
	var edges []edge
	for _, t := range def.Transitions {
		for _, f := range t.From {
			a, b := pos[f], pos[t.To]
			x1, y1 := a.X+a.W, a.Y+a.H/2
			x2, y2 := b.X, b.Y+b.H/2
			if b.X <= a.X { // same column: go down
				x1, y1, x2, y2 = a.X+a.W/2, a.Y+a.H, b.X+b.W/2, b.Y
			}
			if b.Y > a.Y && b.X > a.X {
				x1, y1 = a.X+a.W/2, a.Y+a.H
			}
			edges = append(edges, edge{Label: t.Name, X1: x1, Y1: y1, X2: x2, Y2: y2, LX: (x1+x2)/2 - 3.3*float64(len(t.Name)), LY: (y1+y2)/2 - 6})
		}
	}
	return nodes, edges, float64(40 + (maxRank+1)*220), float64(40 + maxRow*110)
}

type damageRow struct {
	Name, Rule, Damage string
	Count, Base        int64
	Y, W               float64
}

// WriteHTML writes one self-contained page: no network, charts in inline SVG.
func WriteHTML(w io.Writer, rep Report) error {
	layers, lh := bars(rep.Storm.Layers)
	defences, dh := bars(rep.Storm.Defences)
	nodes, edges, sw, sh := diagram(rep.Machine)
	data := map[string]any{
		"R": rep.Storm, "Layers": layers, "LayersH": lh, "Defences": defences, "DefencesH": dh,
		"Nodes": nodes, "Edges": edges, "DiagramW": sw, "DiagramH": sh, "Invariants": invariantNames,
		"Duration": rep.Storm.Duration.Round(1e6).String(),
	}
	check := map[string]int64{}
	for _, v := range rep.Storm.Violations {
		check[v.Kind] = v.Count
	}
	data["Check"] = check
	if c := rep.Compare; c != nil {
		var maxd int64 = 1
		for _, r := range c.Variants {
			maxd = max(maxd, r.Damage())
		}
		var rows []damageRow
		for i, r := range c.Variants {
			var base int64
			for _, v := range c.Baseline.Violations {
				if v.Kind == r.Variant.Damage() {
					base = v.Count
				}
			}
			// log scale keeps a damage of 3 visible next to one of 300
			wdt := 380 * math.Log1p(float64(r.Damage())) / math.Log1p(float64(maxd))
			rows = append(rows, damageRow{Name: r.Name, Rule: r.Variant.Rule(), Damage: r.Variant.Damage(), Count: r.Damage(), Base: base, Y: float64(i*34 + 10), W: wdt})
		}
		data["Damage"], data["DamageH"] = rows, float64(len(rows)*34+20)
		data["Flood"] = c.Flood
		data["Stopped"] = fmt.Sprintf("%.1f%%", 100*c.Flood.Stopped())
	}
	return reportTmpl.Execute(w, data)
}

var reportTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"add": func(a, b float64) float64 { return a + b },
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>idem demo: {{.R.Name}} shop under a duplicate storm</title>
<style>
body{font-family:system-ui,sans-serif;max-width:960px;margin:2em auto;color:#222}
h1{font-size:1.5em} h2{font-size:1.15em;margin-top:2em}
table{border-collapse:collapse} td,th{padding:2px 10px;text-align:left} td.n{text-align:right}
.ok{color:#17692e} .fail{color:#b00020;font-weight:bold}
svg text{font-size:12px;font-family:system-ui,sans-serif}
</style></head><body>
<h1>idem demo: the {{.R.Name}} shop under a duplicate storm</h1>
<p id="summary">{{.R.Orders}} orders on {{.R.Backends}}, {{.R.Requests}} HTTP requests, {{.R.Statements}} database statements, {{.Duration}}.</p>
<section id="verdict" data-violations="{{len .R.Violations}}">
{{if .R.OK}}<p class="ok">Zero violations: every order charged exactly once, no payment or shipment duplicated, no refund over the paid amount, no acknowledged order lost.</p>
{{else}}<p class="fail">{{len .R.Violations}} kinds of violation.</p>{{end}}
<table id="invariants">{{range .Invariants}}<tr data-invariant="{{.}}">{{with index $.Check .}}<td class="fail">FAIL</td><td>{{$}}</td><td class="n">{{.}}</td>{{else}}<td class="ok">ok</td><td>{{.}}</td><td class="n">0</td>{{end}}</tr>{{end}}</table>
</section>

<h2>Duplicates absorbed, per layer</h2>
<svg id="layers-chart" width="700" height="{{.LayersH}}" viewBox="0 0 700 {{.LayersH}}" role="img" aria-label="duplicates absorbed per layer">
{{range .Layers}}<g class="bar" data-layer="{{.Key}}" data-count="{{.Count}}"><title>{{.Title}}</title>
<text x="0" y="{{add .Y 16}}">{{.Label}}</text>
<rect x="140" y="{{.Y}}" width="{{.W}}" height="22" fill="#2f6fb0"></rect>
<text x="{{add .W 146}}" y="{{add .Y 16}}">{{.Count}}</text></g>
{{end}}</svg>

<h2>Other defences</h2>
<svg id="defences-chart" width="700" height="{{.DefencesH}}" viewBox="0 0 700 {{.DefencesH}}" role="img" aria-label="faults refused">
{{range .Defences}}<g class="bar" data-layer="{{.Key}}" data-count="{{.Count}}"><title>{{.Title}}</title>
<text x="0" y="{{add .Y 16}}">{{.Label}}</text>
<rect x="140" y="{{.Y}}" width="{{.W}}" height="22" fill="#6a8f3a"></rect>
<text x="{{add .W 146}}" y="{{add .Y 16}}">{{.Count}}</text></g>
{{end}}</svg>

{{if .Damage}}<h2>Damage per anti-pattern (same storm, one rule broken each; bars on a log scale)</h2>
<svg id="damage-chart" width="900" height="{{.DamageH}}" viewBox="0 0 900 {{.DamageH}}" role="img" aria-label="damage per anti-pattern">
{{range .Damage}}<g class="bar" data-variant="{{.Name}}" data-count="{{.Count}}" data-baseline="{{.Base}}"><title>{{.Rule}}</title>
<text x="0" y="{{add .Y 16}}">{{.Name}}</text>
<rect x="180" y="{{.Y}}" width="{{.W}}" height="22" fill="#b00020"></rect>
<text x="{{add .W 186}}" y="{{add .Y 16}}">{{.Count}} {{.Damage}} (disciplined: {{.Base}})</text></g>
{{end}}</svg>
<p id="flood" data-with="{{.Flood.WithFast}}" data-without="{{.Flood.WithoutFast}}">A flood of {{.Flood.Duplicates}} duplicates of one order cost {{.Flood.WithFast}} database statements with the {{.Flood.FastName}} fast path and {{.Flood.WithoutFast}} without it: {{.Stopped}} stopped before the database.</p>
{{end}}

<h2>The order state machine</h2>
<svg id="state-diagram" width="{{.DiagramW}}" height="{{.DiagramH}}" viewBox="0 0 {{.DiagramW}} {{.DiagramH}}" role="img" aria-label="order state machine">
<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#444"></path></marker></defs>
{{range .Edges}}<g class="transition" data-transition="{{.Label}}"><line x1="{{.X1}}" y1="{{.Y1}}" x2="{{.X2}}" y2="{{.Y2}}" stroke="#444" marker-end="url(#arrow)"></line><text x="{{.LX}}" y="{{.LY}}">{{.Label}}</text></g>
{{end}}{{range .Nodes}}<g class="state" data-state="{{.Name}}"><rect x="{{.X}}" y="{{.Y}}" width="{{.W}}" height="{{.H}}" rx="8" fill="#eef3fa" stroke="#2f6fb0"></rect><text x="{{add .X 12}}" y="{{add .Y 25}}">{{.Name}}</text></g>
{{end}}</svg>

<h2>What the storm threw</h2>
<table id="storm">{{range .R.Storm}}<tr><td>{{.Name}}</td><td class="n">{{.Count}}</td><td>{{.What}}</td></tr>{{end}}</table>
<script>
// Record the rendered geometry, so a headless browser's DOM shows what was drawn.
for (const g of document.querySelectorAll("g.bar, g.state")) {
  const r = g.querySelector("rect").getBBox();
  g.setAttribute("data-drawn-width", Math.round(r.width));
}
document.body.setAttribute("data-rendered", "yes");
</script>
</body></html>
`))
