package step_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/step"
)

// TestCompleterAfterKillStorm: one child process per kill point (every
// boundary of every step of the four-step operation), all running at
// once on one database, each SIGKILLed at its point; nobody retries. The
// completer then finishes every operation from its recovery point: none
// lost (each is completed, or held for an unknown outcome of the unkeyed
// step), none doubled (each effect once at most, the local steps and the
// keyed charge exactly once).
func TestCompleterAfterKillStorm(t *testing.T) {
	svc := newChargeService(t)
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, b, svc)
			r.Lease = 5 * time.Second // sixteen children start at once on a loaded machine
			if b.d == sqlstore.SQLite {
				// A child stopped inside a local step holds SQLite's one
				// write lock until it is killed, and the others' renewals
				// wait for it: a lease of a second would lapse.
				r.Lease = 15 * time.Second
			}
			type op struct{ id, step, point string }
			var ops []op
			var children []*testenv.Child
			for _, name := range steps {
				for _, point := range points {
					o := op{testenv.Name("order"), name, point}
					ops = append(ops, o)
					children = append(children, testenv.StartChild(t, r.childEnv(o.id, o.step, o.point), "-test.run=^$"))
				}
			}
			// Each is killed as soon as it reports: on SQLite a child
			// stopped inside a local step holds the write lock the others
			// wait for.
			alive := make(map[int]bool)
			for i := range children {
				alive[i] = true
			}
			for deadline := time.Now().Add(2 * time.Minute); len(alive) > 0; {
				if time.Now().After(deadline) {
					t.Fatalf("%d children never reached their kill point", len(alive))
				}
				for i := range alive {
					rest, ok := children[i].LineWithin("READY", 20*time.Millisecond)
					if !ok {
						continue
					}
					if rest != "" {
						t.Fatalf("child %v said READY%s", ops[i], rest)
					}
					children[i].Kill()
					delete(alive, i)
				}
			}
			keys := make([]idem.Key, len(ops))
			for i, o := range ops {
				keys[i] = idem.MustKey("shop", o.id)
			}
			opts := r.opts()
			opts.Wait = false
			comp := &step.Completer[string]{Store: r.store, Func: r.op, Options: opts, MaxAttempts: 5,
				KeysFunc: func(context.Context) ([]idem.Key, error) { return keys, nil }}
			deadline := time.Now().Add(2 * time.Minute)
			for {
				rep, err := comp.RunOnce(ctxT(t))
				if err != nil {
					t.Fatal(err)
				}
				if rep.Completed+rep.Held == len(keys) {
					break
				}
				if time.Now().After(deadline) { // an attempt that failed (a lease lost on a loaded machine) is made again next pass
					t.Fatalf("completer pass %+v", rep)
				}
				time.Sleep(100 * time.Millisecond) // the killed children's leases run out
			}
			lost, doubled, held, charged := 0, 0, 0, 0
			for _, o := range ops {
				_, err := r.retry(ctxT(t), o.id)
				isHeld := errors.Is(err, idem.ErrOutcomeUnknown)
				if err != nil && !isHeld {
					t.Errorf("%v: %v", o, err)
					lost++
					continue
				}
				c := r.counts(t, o.id)
				if c["charge"] == 1 {
					charged++
				}
				for _, name := range []string{"reserve", "record", "charge", "emit"} {
					if c[name] > 1 {
						doubled++
						t.Errorf("%v: %s had its effect %d times", o, name, c[name])
					}
				}
				if c["reserve"] != 1 || c["record"] != 1 || c["charge"] != 1 {
					lost++
					t.Errorf("%v: effects %v", o, c)
				}
				if isHeld {
					held++
					if o.step != "emit" || (o.point != "inside" && o.point != "after-effect") {
						t.Errorf("%v: held", o)
					}
				} else if c["emit"] != 1 {
					lost++
					t.Errorf("%v: completed with emit %d times", o, c["emit"])
				}
			}
			t.Logf("completer after a kill storm on %s: %d operations: %d lost, %d doubled, %d held for the unkeyed step's unknown outcome; keyed once %d/%d at the service",
				b.name, len(ops), lost, doubled, held, charged, len(ops))
		})
	}
}
