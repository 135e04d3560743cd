package shop

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// Every anti-pattern, run through the same storm as the disciplined shop
// (TestStormEmbedded), does measurable damage of its kind. The variants run
// in parallel, as RunCompare runs them for `idem demo --compare`.
func TestCompare(t *testing.T) {
	t.Parallel()
	compareVariants(t, func(*testing.T) Backends { return Backends{} })
}

// The same on PostgreSQL (`idem demo --compare --postgres`), where the
// disciplined shop locks its stock with pglock: lock-without-constraint
// once did no damage here, because a session lock does not run out during
// a pause.
func TestComparePostgres(t *testing.T) {
	t.Parallel()
	pg := testenv.Postgres.Need(t)
	compareVariants(t, func(t *testing.T) Backends { return Backends{Postgres: pg, Dir: t.TempDir()} })
}

func compareVariants(t *testing.T, backends func(*testing.T) Backends) {
	for _, v := range Variants {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			r := runStorm(t, StormConfig{Orders: 60, Kills: 1, Variant: v, Backends: backends(t)})
			t.Logf("%-24s %-22s %4d   (%s)", r.Name, v.Damage(), r.Damage(), v.Rule())
			if r.Damage() == 0 {
				t.Errorf("%s did no damage (%s); violations: %+v", r.Name, v.Damage(), r.Violations)
			}
		})
	}
}

// A flood of duplicates of one order costs the database one read each
// without the fast path, and (almost) nothing with it.
func TestFlood(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f, err := RunFlood(ctx, Backends{}, 200)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("flood of %d duplicates: %d statements with the fast path, %d without", f.Duplicates, f.WithFast, f.WithoutFast)
	if f.WithoutFast < int64(f.Duplicates) {
		t.Errorf("without the fast path %d duplicates cost only %d statements", f.Duplicates, f.WithoutFast)
	}
	if f.Stopped() < 0.9 {
		t.Errorf("the fast path stopped only %.1f%% of the duplicates' statements", 100*f.Stopped())
	}
}
