package idem_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// run is a minimal adapter on the engine: it runs work once per key and
// answers every other call from the store.
func run(ctx context.Context, c *idem.Claimer, key idem.Key, work func(context.Context) []byte) ([]byte, bool, error) {
	t, err := c.Begin(ctx, idem.BeginRequest{Key: key, Lease: time.Second})
	if err == nil {
		err = t.Err()
	}
	if err != nil {
		return nil, false, err
	}
	if t.Outcome == idem.Replay {
		return t.Result, true, nil
	}
	var a idem.Attempt
	wctx, err := a.Start(ctx, c, t)
	if err != nil {
		a.End()
		return nil, false, err
	}
	res := work(wctx)
	a.WorkDone(0, nil)
	a.Finishing(ctx)
	defer a.End()
	if err := a.Complete(res, []byte("not-replayable")); err != nil {
		return nil, false, err
	}
	return res, false, nil
}

// Many goroutines through the engine with one key: the work runs once,
// and every answer is that run's result or an in-flight refusal.
func TestAttemptRunsOnce(t *testing.T) {
	t.Parallel()
	c := &idem.Claimer{Store: newMem(t), Wait: -1}
	key := idem.MustKey("t", "once")
	var runs atomic.Int32
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, _, err := run(context.Background(), c, key, func(ctx context.Context) []byte {
				runs.Add(1)
				if idem.FenceFromContext(ctx) == 0 {
					t.Error("work without a fence in its context")
				}
				return []byte("result")
			})
			if err != nil || string(got) != "result" {
				t.Errorf("run = %q, %v", got, err)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("work ran %d times", n)
	}
}

// A result the store refuses as too large leaves the marker: the call
// learns it (ErrNotReplayable and ErrResultTooLarge), and the work never
// runs again.
func TestAttemptTooLargeLeavesMarker(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: -1, MaxResult: 16})
	t.Cleanup(func() { s.Close() })
	c := &idem.Claimer{Store: s}
	key := idem.MustKey("t", "big")
	_, _, err := run(context.Background(), c, key, func(context.Context) []byte { return make([]byte, 64) })
	if !errors.Is(err, idem.ErrNotReplayable) || !errors.Is(err, idem.ErrResultTooLarge) {
		t.Fatalf("first = %v, want ErrNotReplayable and ErrResultTooLarge", err)
	}
	got, replayed, err := run(context.Background(), c, key, func(context.Context) []byte {
		t.Error("the work ran again")
		return nil
	})
	if err != nil || !replayed || string(got) != "not-replayable" {
		t.Fatalf("retry = %q, %v, %v; want the marker replayed", got, replayed, err)
	}
}

// With AtMostOnce, a takeover of a claim whose holder had marked it
// started does not run the work: Start refuses with ErrOutcomeUnknown.
func TestAttemptStartedTakeoverIsNotRun(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "started")
	first, err := s.Begin(context.Background(), idem.BeginRequest{Key: key, Lease: 20 * time.Millisecond})
	if err != nil || first.Outcome != idem.Acquired {
		t.Fatal(first, err)
	}
	if err := s.MarkStarted(context.Background(), first.Owner); err != nil {
		t.Fatal(err)
	}
	c := &idem.Claimer{Store: s, AtMostOnce: true}
	var tk idem.Ticket
	for { // until the holder's lease runs out in the store
		if tk, err = c.Begin(context.Background(), idem.BeginRequest{Key: key}); err != nil {
			t.Fatal(err)
		}
		if tk.Outcome == idem.Acquired {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	var a idem.Attempt
	if _, err := a.Start(context.Background(), c, tk); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("Start of a started takeover = %v, want ErrOutcomeUnknown", err)
	}
	if err := a.Hold([]byte("unknown")); err != nil {
		t.Fatal(err)
	}
	a.End()
	rec, err := s.Get(context.Background(), key)
	if err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "unknown" {
		t.Fatalf("record %+v, %v; want held as outcome-unknown", rec, err)
	}
}
