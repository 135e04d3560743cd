package shop

import (
	"context"
	"testing"
	"time"
)

// Every anti-pattern, run through the same storm as the disciplined shop,
// does measurable damage of its kind, and the disciplined shop does none.
func TestCompare(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	c, err := RunCompare(ctx, StormConfig{Orders: 100, Kills: 1, ChildCommand: childCommand}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !c.Baseline.OK() {
		t.Fatalf("disciplined shop: %+v", c.Baseline.Violations)
	}
	if len(c.Variants) != len(Variants) {
		t.Fatalf("%d variants ran, want %d", len(c.Variants), len(Variants))
	}
	for _, r := range c.Variants {
		t.Logf("%-24s %-22s %4d   (%s)", r.Name, r.Variant.Damage(), r.Damage(), r.Variant.Rule())
		if r.Damage() == 0 {
			t.Errorf("%s did no damage (%s); violations: %+v", r.Name, r.Variant.Damage(), r.Violations)
		}
	}
	f := c.Flood
	t.Logf("flood of %d duplicates: %d statements with the fast path, %d without", f.Duplicates, f.WithFast, f.WithoutFast)
	if f.WithoutFast < int64(f.Duplicates) {
		t.Errorf("without the fast path %d duplicates cost only %d statements", f.Duplicates, f.WithoutFast)
	}
	if f.Stopped() < 0.9 {
		t.Errorf("the fast path stopped only %.1f%% of the duplicates' statements", 100*f.Stopped())
	}
}
