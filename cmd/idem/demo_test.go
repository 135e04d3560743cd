package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/demo/shop"
)

// The demo's consumer children are this test binary started again with
// "demo" and the shop's environment: run the consumer before anything else.
func init() {
	if shop.IsChild() {
		os.Exit(shop.RunChild())
	}
}

// `idem demo` end to end, embedded, with the HTML report: zero violations,
// exit 0, and the report written.
func TestDemoEmbedded(t *testing.T) {
	t.Parallel()
	report := filepath.Join(t.TempDir(), "report.html")
	code, out, errs := runCLI(t, "demo", "--orders", "40", "--kills", "1", "--quiet", "--report", report)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errs)
	}
	for _, want := range []string{"Zero violations.", "Duplicates absorbed, per layer", "  ok    duplicate payments", "Report: " + report} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	b, err := os.ReadFile(report)
	if err != nil || !strings.Contains(string(b), `id="layers-chart"`) {
		t.Fatalf("report: %v", err)
	}
}

func TestDemoUsage(t *testing.T) {
	t.Parallel()
	if code, _, _ := runCLI(t, "demo", "--orders", "3"); code != 2 {
		t.Errorf("--orders 3: exit %d, want 2", code)
	}
	if code, _, _ := runCLI(t, "demo", "stray"); code != 2 {
		t.Errorf("stray argument: exit %d, want 2", code)
	}
	if code, out, errs := runCLI(t, "demo", "-h"); code != 0 || !strings.Contains(out, "-compare") {
		t.Errorf("-h: exit %d, %q %q", code, out, errs)
	}
}
