package shop

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// renderDOM loads file in headless Chromium and returns the DOM after its
// script ran.
func renderDOM(t *testing.T, file string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := testenv.Chromium(ctx, t, "--virtual-time-budget=2000", "--dump-dom", "file://"+file)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errb.String())
	}
	return out.String()
}

func attr(t *testing.T, dom, sel, name string) string {
	t.Helper()
	re := regexp.MustCompile(`<[^>]*` + regexp.QuoteMeta(sel) + `[^>]*>`)
	tag := re.FindString(dom)
	if tag == "" {
		t.Fatalf("no element with %s in the rendered page", sel)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(name) + `="([^"]*)"`).FindStringSubmatch(tag)
	if m == nil {
		t.Fatalf("element %s has no %s: %s", sel, name, tag)
	}
	return m[1]
}

// The report of a real storm and comparison, rendered by a real browser:
// the charts are drawn with widths that follow the counts, the state
// machine shows every state, and the verdict is the storm's.
func TestReportRendersInChromium(t *testing.T) {
	t.Parallel()
	r := runStorm(t, StormConfig{Orders: 60, Kills: 1})
	if !r.OK() {
		t.Fatalf("violations: %+v", r.Violations)
	}
	// A comparison with two hand-checked variants keeps the test short; the
	// full --compare runs in TestCompare.
	c := &Comparison{Baseline: r, Flood: Flood{Duplicates: 10, WithFast: 1, WithoutFast: 10, FastName: "memory store"}}
	for _, v := range []Variant{FrontendOnly, RejectWithoutRedis} {
		vr := *r
		vr.Variant, vr.Name = v, v.String()
		vr.Violations = []Violation{{Kind: v.Damage(), Count: int64(7 * (int(v) + 1))}}
		c.Variants = append(c.Variants, &vr)
	}
	file := filepath.Join(t.TempDir(), "report.html")
	var buf bytes.Buffer
	if err := WriteHTML(&buf, Report{Storm: r, Compare: c, Machine: OrderMachine(Disciplined)}); err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(buf.Bytes(), []byte("http://")) || bytes.Contains(buf.Bytes(), []byte("https://")) {
		t.Error("the report refers to the network; it must be self-contained")
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	dom := renderDOM(t, file)
	if !strings.Contains(dom, `data-rendered="yes"`) {
		t.Fatal("the page's script did not run")
	}
	if got := attr(t, dom, `id="verdict"`, "data-violations"); got != "0" {
		t.Errorf("verdict shows %s violations, want 0", got)
	}
	if !strings.Contains(dom, "Zero violations") {
		t.Error("verdict text missing")
	}
	// Bars: drawn width proportional to the count (within rounding).
	var maxCount int64
	for _, l := range r.Layers {
		maxCount = max(maxCount, l.Count)
	}
	for _, l := range r.Layers {
		sel := `data-layer="` + l.Name + `"`
		count, _ := strconv.ParseInt(attr(t, dom, sel, "data-count"), 10, 64)
		if count != l.Count {
			t.Errorf("layer %s shows %d, want %d", l.Name, count, l.Count)
		}
		w, _ := strconv.Atoi(attr(t, dom, sel, "data-drawn-width"))
		want := int(420 * float64(l.Count) / float64(maxCount))
		if w < want-1 || w > want+1 {
			t.Errorf("layer %s drawn %dpx wide, want %d", l.Name, w, want)
		}
	}
	for _, v := range c.Variants {
		sel := `data-variant="` + v.Name + `"`
		if got := attr(t, dom, sel, "data-count"); got != strconv.FormatInt(v.Damage(), 10) {
			t.Errorf("damage of %s shows %s, want %d", v.Name, got, v.Damage())
		}
		if w, _ := strconv.Atoi(attr(t, dom, sel, "data-drawn-width")); w <= 0 {
			t.Errorf("damage bar of %s not drawn", v.Name)
		}
	}
	for _, s := range OrderMachine(Disciplined).States {
		if w, _ := strconv.Atoi(attr(t, dom, `data-state="`+s+`"`, "data-drawn-width")); w <= 0 {
			t.Errorf("state %s not drawn", s)
		}
	}
	for _, tr := range []string{"start_payment", "pay", "ship", "cancel"} {
		if !strings.Contains(dom, `data-transition="`+tr+`"`) {
			t.Errorf("transition %s missing from the diagram", tr)
		}
	}
	if got := attr(t, dom, `id="flood"`, "data-without"); got != "10" {
		t.Errorf("flood shows %s statements without the fast path, want 10", got)
	}
}
