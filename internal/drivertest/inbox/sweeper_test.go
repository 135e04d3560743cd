package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/configtest"
)

func TestSweepDeletesOldRowsInBatches(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, &inbox.Config{Retention: 30 * time.Minute})
		ctx := ctxT(t)
		for i := range 250 {
			id := fmt.Sprintf("m%03d", i)
			if _, err := f.ib.Process(ctx, "c", id, f.effect(id)); err != nil {
				t.Fatal(err)
			}
		}
		f.backdate(t, "message_id < "+f.ph(1), "m230") // 230 rows become 1h old
		sw, err := inbox.NewSweeper(f.ib, &inbox.SweeperConfig{BatchSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		n, err := sw.Sweep(ctx)
		if err != nil || n != 230 {
			t.Fatalf("Sweep = %d, %v; want 230", n, err)
		}
		if rows := f.dedupRows(t); rows != 20 {
			t.Fatalf("%d rows left, want 20", rows)
		}
		if n, err := sw.Sweep(ctx); err != nil || n != 0 {
			t.Fatalf("second Sweep = %d, %v; want 0", n, err)
		}
		// Documented consequence: past the window a redelivery runs again.
		if out, err := f.ib.Process(ctx, "c", "m000", f.effect("m000")); err != nil || out != inbox.Processed {
			t.Fatalf("swept message: %v, %v", out, err)
		}
		// Within the window it is still a duplicate.
		if out, err := f.ib.Process(ctx, "c", "m240", f.effect("m240")); err != nil || out != inbox.Duplicate {
			t.Fatalf("fresh message: %v, %v", out, err)
		}
	})
}

// TestSweepRacesReinsert: redeliveries of old messages race the sweeper that
// deletes their rows. Each delivery must end as Processed or Duplicate without
// error, and a row a redelivery re-inserted is fresh: the sweeper keeps it.
func TestSweepRacesReinsert(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, &inbox.Config{Retention: 30 * time.Minute})
		ctx := ctxT(t)
		const n = 150
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("m%03d", i)
			if _, err := f.ib.Process(ctx, "c", ids[i], func(context.Context, *sql.Tx) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		f.backdate(t, "")
		sw, err := inbox.NewSweeper(f.ib, &inbox.SweeperConfig{BatchSize: 7})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		outcomes := map[string]inbox.Outcome{}
		var wg sync.WaitGroup
		stopSweeping := make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-stopSweeping:
					return
				default:
				}
				if _, err := sw.Sweep(ctx); err != nil && !inbox.IsRetryable(err) {
					t.Errorf("sweep: %v", err)
					return
				}
			}
		})
		var workers sync.WaitGroup
		for w := range 4 {
			workers.Go(func() {
				for i := w; i < n; i += 4 {
					id := ids[i]
					for {
						out, err := f.ib.Process(ctx, "c", id, f.effect(id))
						if inbox.IsRetryable(err) {
							continue // the broker would redeliver
						}
						if err != nil {
							t.Errorf("%s: %v", id, err)
						}
						mu.Lock()
						outcomes[id] = out
						mu.Unlock()
						break
					}
				}
			})
		}
		workers.Wait()
		close(stopSweeping)
		wg.Wait()
		if _, err := sw.Sweep(ctx); err != nil {
			t.Fatal(err)
		}
		processed := 0
		for _, id := range ids {
			switch outcomes[id] {
			case inbox.Processed:
				processed++
				if got := f.count(t, `SELECT COUNT(*) FROM `+f.table+` WHERE message_id = `+f.ph(1), id); got != 1 {
					t.Errorf("%s: processed but its fresh dedup row was swept", id)
				}
				if e := f.effectsOf(t, id); e != 1 {
					t.Errorf("%s: %d effects", id, e)
				}
			case inbox.Duplicate:
				if e := f.effectsOf(t, id); e != 0 {
					t.Errorf("%s: duplicate but %d effects", id, e)
				}
			default:
				t.Errorf("%s: outcome %v", id, outcomes[id])
			}
		}
		t.Logf("%d of %d redeliveries came after the sweep (processed again), %d before (duplicate)", processed, n, n-processed)
	})
}

func TestSweeperStartStop(t *testing.T) {
	f := newFixture(t, backends()[2], &inbox.Config{Retention: time.Minute})
	ctx := ctxT(t)
	for _, id := range []string{"a", "b"} {
		if _, err := f.ib.Process(ctx, "c", id, f.effect(id)); err != nil {
			t.Fatal(err)
		}
	}
	f.backdate(t, "message_id = 'a'")
	sw, err := inbox.NewSweeper(f.ib, &inbox.SweeperConfig{Interval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sw.Stop(ctx); err != nil {
		t.Fatalf("Stop before Start: %v", err)
	}
	if err := sw.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sw.Start(ctx); !errors.Is(err, inbox.ErrAlreadyStarted) {
		t.Fatalf("second Start: %v", err)
	}
	for f.dedupRows(t) != 1 { // poll: the first sweep runs at once
		time.Sleep(5 * time.Millisecond)
	}
	if err := sw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sw.Stop(ctx); err != nil {
		t.Fatalf("double Stop: %v", err)
	}
	// Restart after Stop works; a cancelled context stops it too.
	cctx, cancel := context.WithCancel(ctx)
	if err := sw.Start(cctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := sw.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = inbox.NewSweeper(f.ib, &inbox.SweeperConfig{BatchSize: -1})
	configtest.Want(t, err, "inbox", "SweeperConfig.BatchSize")
}

// TestSweepExtremeRetention: a Retention of up to math.MaxInt64 (292
// years) keeps every row: the cutoff, the database clock minus the
// retention, lands in the 18th century on every dialect; it never wraps
// into the future (which would delete everything) nor fails.
func TestSweepExtremeRetention(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		for _, retention := range []time.Duration{math.MaxInt64, math.MaxInt64 - 1} {
			f := newFixture(t, b, &inbox.Config{Retention: retention})
			ctx := ctxT(t)
			for i := range 3 {
				id := fmt.Sprintf("m%d", i)
				if _, err := f.ib.Process(ctx, "c", id, f.effect(id)); err != nil {
					t.Fatal(err)
				}
			}
			f.backdate(t, "") // an hour old: swept by any ordinary retention
			sw, err := inbox.NewSweeper(f.ib, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := sw.Sweep(ctx); err != nil || n != 0 {
				t.Fatalf("Retention %v: Sweep = %d, %v; want 0", retention, n, err)
			}
			if rows := f.dedupRows(t); rows != 3 {
				t.Fatalf("Retention %v: %d rows left, want 3", retention, rows)
			}
			if out, err := f.ib.Process(ctx, "c", "m0", f.effect("m0")); err != nil || out != inbox.Duplicate {
				t.Fatalf("Retention %v: redelivery = %v, %v; want Duplicate", retention, out, err)
			}
		}
	})
}
