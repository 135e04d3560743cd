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

// A result the store cannot hold leaves a terminal record: fn never runs
// again for the key, and every call says why.
func TestDoResultTooLargeIsNotReplayable(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: -1, MaxResult: 64})
	t.Cleanup(func() { s.Close() })
	key := idem.MustKey("t", "big")
	var runs atomic.Int32
	fn := func(context.Context) (string, error) {
		runs.Add(1)
		return string(make([]byte, 1000)), nil
	}
	_, err := idem.Do(context.Background(), s, key, nil, fn)
	if !errors.Is(err, idem.ErrNotReplayable) || !errors.Is(err, idem.ErrResultTooLarge) {
		t.Fatalf("first Do = %v, want ErrNotReplayable and ErrResultTooLarge", err)
	}
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := idem.Do(context.Background(), s, key, &idem.Options{Wait: true}, fn); !errors.Is(err, idem.ErrNotReplayable) {
				t.Errorf("retry = %v, want ErrNotReplayable", err)
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
	rec, err := s.Get(context.Background(), key)
	if err != nil || rec.State != idem.StateCompleted || string(rec.Result) != string(idem.NotReplayableResult()) {
		t.Fatalf("record = %+v, %v; want completed with the not-replayable marker", rec, err)
	}
}

// deadHolder claims key with a short lease, optionally marks it started,
// and never finishes: a process that died.
func deadHolder(t *testing.T, s idem.Store, key idem.Key, started bool) {
	t.Helper()
	c, err := s.Begin(context.Background(), idem.BeginRequest{Key: key, Lease: 50 * time.Millisecond})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %v, %v", c.Outcome, err)
	}
	if started {
		if err := s.MarkStarted(context.Background(), c.Owner); err != nil {
			t.Fatal(err)
		}
	}
}

func TestDoAtMostOnceNeverRunsAfterStartedHolderDied(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "pay")
	deadHolder(t, s, key, true)
	var runs atomic.Int32
	fn := func(context.Context) (int, error) { runs.Add(1); return 1, nil }
	opts := &idem.Options{AtMostOnce: true, Wait: true, Lease: time.Minute}
	// Many callers retry at once, across the takeover: none runs fn, all
	// learn the outcome is unknown.
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := idem.Do(ctx, s, key, opts, fn); !errors.Is(err, idem.ErrOutcomeUnknown) {
				t.Errorf("Do after a started holder died = %v, want ErrOutcomeUnknown", err)
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 0 {
		t.Fatalf("fn ran %d times after a holder had started it", runs.Load())
	}
	// Also a call without AtMostOnce replays the unknown outcome.
	if _, err := idem.Do(context.Background(), s, key, nil, fn); !errors.Is(err, idem.ErrOutcomeUnknown) || runs.Load() != 0 {
		t.Fatalf("plain Do on an outcome-unknown key = %v (runs %d)", err, runs.Load())
	}
	rec, err := s.Get(context.Background(), key)
	if err != nil || rec.State != idem.StateHeld || string(rec.Result) != string(idem.OutcomeUnknownResult()) || !rec.Started {
		t.Fatalf("record = %+v, %v; want held, started, with the outcome-unknown marker", rec, err)
	}
}

func TestDoAtMostOnceRunsWhenHolderDiedBeforeStarting(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "pay")
	deadHolder(t, s, key, false)
	opts := &idem.Options{AtMostOnce: true, Wait: true}
	v, err := idem.Do(context.Background(), s, key, opts, func(context.Context) (int, error) { return 42, nil })
	if err != nil || v != 42 {
		t.Fatalf("Do after an unstarted holder died = %v, %v; want fn to run", v, err)
	}
	rec, err := s.Get(context.Background(), key)
	if err != nil || !rec.Started || rec.State != idem.StateCompleted {
		t.Fatalf("record = %+v, %v; want completed and started", rec, err)
	}
}

func TestDoAtMostOncePanicLeavesOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "pay")
	opts := &idem.Options{AtMostOnce: true}
	func() {
		defer func() {
			if r := recover(); r != "mid-transfer" {
				t.Fatalf("recovered %v", r)
			}
		}()
		_, _ = idem.Do(context.Background(), s, key, opts, func(context.Context) (int, error) { panic("mid-transfer") })
	}()
	ran := false
	if _, err := idem.Do(context.Background(), s, key, opts, func(context.Context) (int, error) { ran = true; return 0, nil }); !errors.Is(err, idem.ErrOutcomeUnknown) || ran {
		t.Fatalf("retry after a panic = %v (ran %v), want ErrOutcomeUnknown without running", err, ran)
	}
}

// fn's error still releases: the caller says nothing happened.
func TestDoAtMostOnceErrorReleases(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "pay")
	opts := &idem.Options{AtMostOnce: true}
	boom := errors.New("declined before sending")
	if _, err := idem.Do(context.Background(), s, key, opts, func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatal(err)
	}
	v, err := idem.Do(context.Background(), s, key, opts, func(context.Context) (int, error) { return 7, nil })
	if err != nil || v != 7 {
		t.Fatalf("retry after fn's error = %v, %v; want it to run", v, err)
	}
}

// markFails is a store whose MarkStarted fails: fn must not run, and the
// claim is given back.
type markFails struct {
	idem.Store
	err error
}

func (m markFails) MarkStarted(context.Context, idem.Owner) error { return m.err }

func TestDoAtMostOnceDoesNotRunWhenMarkFails(t *testing.T) {
	t.Parallel()
	mem := newMem(t)
	key := idem.MustKey("t", "pay")
	down := idem.StoreError(context.Background(), "mark started", errors.New("connection reset"))
	s := markFails{Store: mem, err: down}
	ran := false
	_, err := idem.Do(context.Background(), s, key, &idem.Options{AtMostOnce: true}, func(context.Context) (int, error) { ran = true; return 1, nil })
	if !idem.IsUnavailable(err) || ran {
		t.Fatalf("Do with a failing MarkStarted = %v (ran %v), want unavailable without running", err, ran)
	}
	v, err := idem.Do(context.Background(), mem, key, &idem.Options{AtMostOnce: true}, func(context.Context) (int, error) { return 2, nil })
	if err != nil || v != 2 {
		t.Fatalf("retry = %v, %v; want the released key to run", v, err)
	}
}
