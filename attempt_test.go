package idem_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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
	if err != nil || rec.State != idem.StateHeld || string(rec.Result) != "unknown" {
		t.Fatalf("record %+v, %v; want held as outcome-unknown", rec, err)
	}
}

// deadlines records, per Store method, whether the last call it got had
// a deadline. It holds its store as an idem.Store, as any wrapper does,
// so it has no InProcess method.
type deadlines struct {
	idem.Store
	mu  sync.Mutex
	had map[string]bool
}

func (d *deadlines) note(ctx context.Context, m string) {
	_, ok := ctx.Deadline()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.had == nil {
		d.had = map[string]bool{}
	}
	d.had[m] = ok
}

func (d *deadlines) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	d.note(ctx, "Begin")
	return d.Store.Begin(ctx, req)
}

func (d *deadlines) MarkStarted(ctx context.Context, o idem.Owner) error {
	d.note(ctx, "MarkStarted")
	return d.Store.MarkStarted(ctx, o)
}

func (d *deadlines) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	d.note(ctx, "Complete")
	return d.Store.Complete(ctx, o, r)
}

func (d *deadlines) Hold(ctx context.Context, o idem.Owner, r []byte) error {
	d.note(ctx, "Hold")
	return d.Store.Hold(ctx, o, r)
}

func (d *deadlines) Release(ctx context.Context, o idem.Owner) error {
	d.note(ctx, "Release")
	return d.Store.Release(ctx, o)
}

// claimedStore says whether it is in process.
type claimedStore struct {
	*deadlines
	says bool
}

func (c claimedStore) InProcess() bool { return c.says }

// TestStoreTimeoutSparesOnlyInProcessStores: with a StoreTimeout, every
// store call gets a deadline (Begin, the mark, Complete, Hold, Release) unless
// the store's own type has an InProcess method that says so; a wrapper around memstore
// (which holds it as an idem.Store) keeps the deadlines, and so does a
// store whose InProcess says false. An in-process store's calls still
// get the caller's deadline.
func TestStoreTimeoutSparesOnlyInProcessStores(t *testing.T) {
	t.Parallel()
	var _ interface{ InProcess() bool } = newMem(t) // memstore has the capability
	cases := []struct {
		name     string
		store    func(d *deadlines) idem.Store
		deadline bool
	}{
		{"wrapper around memstore", func(d *deadlines) idem.Store { return d }, true},
		{"says not in process", func(d *deadlines) idem.Store { return claimedStore{d, false} }, true},
		{"in process", func(d *deadlines) idem.Store { return claimedStore{d, true} }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			d := &deadlines{Store: newMem(t)}
			c := &idem.Claimer{Store: tc.store(d), StoreTimeout: time.Minute, AtMostOnce: true}
			if _, _, err := run(context.Background(), c, idem.MustKey("t", "done"), func(context.Context) []byte { return []byte("r") }); err != nil {
				t.Fatal(err)
			}
			tk, err := c.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("t", "released")})
			if err != nil {
				t.Fatal(err)
			}
			var a idem.Attempt
			if _, err := a.Start(context.Background(), c, tk); err != nil {
				t.Fatal(err)
			}
			a.WorkDone(0, nil)
			if err := a.Release(); err != nil {
				t.Fatal(err)
			}
			tk, err = c.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("t", "held")})
			if err != nil {
				t.Fatal(err)
			}
			var h idem.Attempt
			if _, err := h.Start(context.Background(), c, tk); err != nil {
				t.Fatal(err)
			}
			h.WorkDone(0, nil)
			if err := h.Hold(idem.OutcomeUnknownResult()); err != nil {
				t.Fatal(err)
			}
			for _, m := range []string{"Begin", "MarkStarted", "Complete", "Hold", "Release"} {
				if had, ok := d.had[m]; !ok || had != tc.deadline {
					t.Errorf("%s: called %v, with a deadline %v; want one: %v", m, ok, had, tc.deadline)
				}
			}
			// The caller's own deadline reaches an in-process store too.
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			if _, err := c.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", "caller")}); err != nil {
				t.Fatal(err)
			}
			if !d.had["Begin"] {
				t.Error("Begin without the caller's deadline")
			}
		})
	}
}

// orderObserver records the phases and store calls of attempts, in order.
type orderObserver struct {
	mu     sync.Mutex
	events []string
}

type phaseCtxKey struct{}

func (o *orderObserver) add(e string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, e)
}

func (o *orderObserver) StoreCall(_ context.Context, m idem.StoreMethod, _ time.Duration, err error) {
	o.add(fmt.Sprintf("store %d %v", m, err))
}

func (o *orderObserver) StartPhase(ctx context.Context, p idem.AttemptPhase, _ idem.Key) (context.Context, func(idem.PhaseReport)) {
	o.add(fmt.Sprintf("start %d", p))
	return context.WithValue(ctx, phaseCtxKey{}, p), func(r idem.PhaseReport) {
		o.add(fmt.Sprintf("end %d status %d err %v", p, r.Status, r.Err))
	}
}

// Attempt.Run: work that panics (or calls runtime.Goexit) ends the work
// phase with what abandoned reports, then the complete phase starts and
// settle finishes the claim with its context, then End; the panic goes
// on. Work that returns leaves all that to the caller.
func TestAttemptRunAbandoned(t *testing.T) {
	t.Parallel()
	errAbandoned := errors.New("work abandoned")
	for _, tc := range []struct {
		name string
		work func()
	}{
		{"panic", func() { panic("boom") }},
		{"Goexit", runtime.Goexit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obs := &orderObserver{}
			c := &idem.Claimer{Store: newMem(t), Observer: obs}
			key := idem.MustKey("t", "run-"+tc.name)
			tk, err := c.Begin(context.Background(), idem.BeginRequest{Key: key})
			if err != nil || tk.Outcome != idem.Acquired {
				t.Fatal(tk.Outcome, err)
			}
			var a idem.Attempt
			wctx, err := a.Start(context.Background(), c, tk)
			if err != nil {
				t.Fatal(err)
			}
			var recovered any
			var settled bool
			done := make(chan struct{})
			go func() { // Goexit ends this goroutine, not the test's
				defer close(done)
				defer func() { recovered = recover() }()
				a.Run(context.Background(), tc.work, func() (int, error) {
					if wctx.Err() != nil {
						t.Error("the work's context ended before abandoned was called")
					}
					return 7, errAbandoned
				}, func(fctx context.Context) {
					settled = true
					if fctx.Value(phaseCtxKey{}) != idem.PhaseComplete {
						t.Error("settle did not get the complete phase's context")
					}
					if wctx.Err() == nil {
						t.Error("settle called before the work phase ended")
					}
					if err := a.Release(); err != nil {
						t.Errorf("Release: %v", err)
					}
				})
				t.Error("Run returned after the work did not")
			}()
			<-done
			if !settled {
				t.Fatal("settle not called")
			}
			if tc.name == "panic" && recovered != "boom" {
				t.Errorf("recovered %v, want the work's panic going on", recovered)
			}
			want := []string{
				"start 1", "store 0 <nil>", "end 1 status 0 err <nil>", // Begin
				"start 2",
				"end 2 status 7 err work abandoned",
				"start 3", "store 2 <nil>",
				"end 3 status 0 err <nil>", // End
			}
			obs.mu.Lock()
			got := fmt.Sprint(obs.events)
			obs.mu.Unlock()
			if got != fmt.Sprint(want) {
				t.Errorf("events\n%v\nwant\n%v", got, want)
			}
			// The claim was released: the next caller runs the work.
			if tk, err := c.Begin(context.Background(), idem.BeginRequest{Key: key}); err != nil || tk.Outcome != idem.Acquired {
				t.Errorf("Begin after the abandoned run = %v, %v; want Acquired", tk.Outcome, err)
			}
		})
	}
}

// Concurrent callers of one key whose work panics: each panic releases
// the claim through Run, so every caller's work runs in turn, one at a
// time, and the claim is never left behind.
func TestAttemptRunPanicsReleaseConcurrently(t *testing.T) {
	t.Parallel()
	c := &idem.Claimer{Store: newMem(t), Wait: -1}
	key := idem.MustKey("t", "run-concurrent")
	const callers = 16
	var running, runs atomic.Int32
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != "boom" {
					t.Errorf("recovered %v, want boom", p)
				}
			}()
			tk, err := c.Begin(context.Background(), idem.BeginRequest{Key: key})
			if err != nil || tk.Outcome != idem.Acquired {
				t.Errorf("Begin = %v, %v", tk.Outcome, err)
				panic("boom")
			}
			var a idem.Attempt
			if _, err := a.Start(context.Background(), c, tk); err != nil {
				t.Errorf("Start: %v", err)
				panic("boom")
			}
			defer a.End()
			a.Run(context.Background(), func() {
				if running.Add(1) != 1 {
					t.Error("two callers ran the work at once")
				}
				runs.Add(1)
				running.Add(-1)
				panic("boom")
			}, func() (int, error) { return 0, errors.New("panicked") }, func(context.Context) {
				if err := a.Release(); err != nil {
					t.Errorf("Release: %v", err)
				}
			})
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != callers {
		t.Fatalf("work ran %d times, want once per caller (%d)", n, callers)
	}
}
