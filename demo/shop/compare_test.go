package shop

import (
	"context"
	"fmt"
	"strings"
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

// compareStorms bounds the storms a variant gets to show its damage. Most
// anti-patterns are races: check-then-act does damage only when two
// submits of one form both check before either inserts, which a storm of
// 60 orders gives 3 to 6 times on an idle machine, and once gave 0 times
// with the whole suite and a CPU hog beside it. A variant that does no
// damage in three storms in a row is broken, not unlucky.
const compareStorms = 3

func compareVariants(t *testing.T, backends func(*testing.T) Backends) {
	for _, v := range Variants {
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			var clean []string
			for try := 1; try <= compareStorms; try++ {
				r := runStorm(t, StormConfig{Orders: 60, Kills: 1, Variant: v, Backends: backends(t)})
				t.Logf("%-24s %-22s %4d   (%s)", r.Name, v.Damage(), r.Damage(), v.Rule())
				if r.Damage() > 0 {
					return
				}
				clean = append(clean, fmt.Sprintf("storm %d: violations %+v", try, r.Violations))
			}
			t.Errorf("%s did no damage (%s) in %d storms: %s", v, v.Damage(), compareStorms, strings.Join(clean, "; "))
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
