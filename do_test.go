package idem_test

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newMem(t *testing.T) *memstore.Store {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

type charge struct {
	ID     string
	Amount int
}

func TestDoRunsOnceThenReplays(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "charge-1")
	runs := 0
	fn := func(ctx context.Context) (charge, error) {
		runs++
		return charge{ID: "ch_1", Amount: 100 * runs}, nil
	}
	for i := 0; i < 3; i++ {
		c, err := idem.Do(context.Background(), s, key, nil, fn)
		if err != nil {
			t.Fatal(err)
		}
		if c != (charge{ID: "ch_1", Amount: 100}) {
			t.Fatalf("call %d got %+v", i, c)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times", runs)
	}
}

func TestDoErrorReleasesClaim(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "k")
	boom := errors.New("card declined by network timeout")
	_, err := idem.Do(context.Background(), s, key, nil, func(context.Context) (int, error) { return 0, boom })
	if !errors.Is(err, boom) {
		t.Fatalf("Do = %v, want fn's error", err)
	}
	v, err := idem.Do(context.Background(), s, key, nil, func(context.Context) (int, error) { return 7, nil })
	if err != nil || v != 7 {
		t.Fatalf("retry after failure = %v, %v; want it to run", v, err)
	}
}

func TestDoPanicReleasesClaim(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "k")
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the handler's panic", r)
			}
		}()
		_, _ = idem.Do(context.Background(), s, key, nil, func(context.Context) (int, error) { panic("kaboom") })
	}()
	v, err := idem.Do(context.Background(), s, key, nil, func(context.Context) (int, error) { return 1, nil })
	if err != nil || v != 1 {
		t.Fatalf("retry after panic = %v, %v", v, err)
	}
}

func TestDoInFlightAndMismatch(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "k")
	started, finish := make(chan struct{}), make(chan struct{})
	done := make(chan error)
	go func() {
		_, err := idem.Do(context.Background(), s, key, &idem.Options{Fingerprint: idem.FingerprintOf([]byte("a"))}, func(context.Context) (int, error) {
			close(started)
			<-finish
			return 1, nil
		})
		done <- err
	}()
	<-started
	_, err := idem.Do(context.Background(), s, key, &idem.Options{Fingerprint: idem.FingerprintOf([]byte("a"))}, func(context.Context) (int, error) {
		t.Error("duplicate ran")
		return 0, nil
	})
	var inflight *idem.InFlightError
	if !errors.As(err, &inflight) || inflight.RetryAfter <= 0 {
		t.Fatalf("duplicate = %v, want *InFlightError with RetryAfter", err)
	}
	_, err = idem.Do(context.Background(), s, key, &idem.Options{Fingerprint: idem.FingerprintOf([]byte("b"))}, func(context.Context) (int, error) { return 0, nil })
	if !errors.Is(err, idem.ErrMismatch) {
		t.Fatalf("other fingerprint = %v, want ErrMismatch", err)
	}
	close(finish)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// failingStore fails selected operations of an underlying store.
type failingStore struct {
	idem.Store
	complete, extend error
	extends          atomic.Int32
}

func (f *failingStore) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	if f.complete != nil {
		return f.complete
	}
	return f.Store.Complete(ctx, o, r)
}

func (f *failingStore) Extend(ctx context.Context, o idem.Owner, lease time.Duration) error {
	f.extends.Add(1)
	if f.extend != nil {
		return f.extend
	}
	return f.Store.Extend(ctx, o, lease)
}

func TestDoNeverReturnsUnrecordedSuccess(t *testing.T) {
	t.Parallel()
	down := idem.StoreError(context.Background(), "complete", errors.New("connection refused"))
	s := &failingStore{Store: newMem(t), complete: down}
	v, err := idem.Do(context.Background(), s, idem.MustKey("t", "k"), nil, func(context.Context) (int, error) { return 42, nil })
	if !idem.IsUnavailable(err) || v != 0 {
		t.Fatalf("Do with failing Complete = %v, %v; want the store error and no result", v, err)
	}
}

func TestDoHeartbeatKeepsLongOperationExclusive(t *testing.T) {
	t.Parallel()
	s := &failingStore{Store: newMem(t)}
	key := idem.MustKey("t", "slow")
	// Not shorter: the heartbeat gives the work up when no renewal succeeds
	// within four fifths of the lease, and a loaded machine under -race
	// stalls goroutines for longer than 120 ms (a 150 ms lease).
	lease := time.Second
	opts := &idem.Options{Lease: lease}
	inside := make(chan struct{})
	ownerDone := make(chan struct{})
	var dupRuns atomic.Int32
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(ownerDone)
		_, err := idem.Do(context.Background(), s, key, opts, func(ctx context.Context) (int, error) {
			close(inside)
			// Work for many leases; the heartbeat must keep the claim.
			for s.extends.Load() < 6 {
				if ctx.Err() != nil {
					return 0, context.Cause(ctx)
				}
				time.Sleep(10 * time.Millisecond)
			}
			return 1, nil
		})
		if err != nil {
			t.Errorf("slow Do: %v", err)
		}
	}()
	<-inside
	// Until the owner is done: an owner that gave up (its error is
	// reported above) renews no more, and the loop must not wait for it.
	for s.extends.Load() < 6 && !isClosed(ownerDone) {
		_, err := idem.Do(context.Background(), s, key, opts, func(context.Context) (int, error) {
			dupRuns.Add(1)
			return 2, nil
		})
		if err != nil && !errors.Is(err, idem.ErrInFlight) {
			t.Fatalf("duplicate: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wg.Wait()
	if dupRuns.Load() != 0 {
		t.Fatalf("a duplicate ran %d times while the owner was alive and renewing", dupRuns.Load())
	}
}

func TestHeartbeatCancelsWorkWhenLeaseLost(t *testing.T) {
	t.Parallel()
	for name, extendErr := range map[string]error{
		"lease lost":      idem.ErrLeaseLost,
		"store down":      idem.StoreError(context.Background(), "extend", errors.New("connection refused")),
		"store hangs ctx": context.DeadlineExceeded,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := &failingStore{Store: newMem(t), extend: extendErr}
			_, err := idem.Do(context.Background(), s, idem.MustKey("t", "k"), &idem.Options{Lease: 60 * time.Millisecond},
				func(ctx context.Context) (int, error) {
					<-ctx.Done()
					return 0, context.Cause(ctx)
				})
			if !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("work ended with %v, want ErrLeaseLost as the cause", err)
			}
		})
	}
}

func TestDoCompletesAfterCallerGivesUp(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "k")
	ctx, cancel := context.WithCancel(context.Background())
	_, err := idem.Do(ctx, s, key, nil, func(context.Context) (string, error) {
		cancel() // the client disconnects while the operation finishes
		return "done", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	v, err := idem.Do(context.Background(), s, key, nil, func(context.Context) (string, error) { return "again", nil })
	if err != nil || v != "done" {
		t.Fatalf("retry = %q, %v; want the stored result", v, err)
	}
}

func TestDoWaitGivesUpWithContext(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "k")
	o, err := s.Begin(context.Background(), idem.BeginRequest{Key: key, Lease: time.Minute})
	if err != nil || o.Outcome != idem.Acquired {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = idem.Do(ctx, s, key, &idem.Options{Wait: true}, func(context.Context) (int, error) { return 0, nil })
	if !errors.Is(err, idem.ErrInFlight) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait past deadline = %v; want ErrInFlight and DeadlineExceeded", err)
	}
}

// stallingStore answers every Begin after the first only when ctx ends:
// the caller's deadline falls during a poll.
type stallingStore struct {
	idem.Store
	begins atomic.Int32
}

func (s *stallingStore) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	if s.begins.Add(1) == 1 {
		return s.Store.Begin(ctx, req)
	}
	<-ctx.Done()
	return idem.Claim{}, ctx.Err()
}

// A wait whose context ends during a poll (or as the poll's timer fires,
// which the select may pick over ctx.Done) still reports the key in flight
// and why the wait stopped, not the poll's bare context error.
func TestDoWaitContextEndsDuringPoll(t *testing.T) {
	t.Parallel()
	mem := newMem(t)
	key := idem.MustKey("t", "k")
	if o, err := mem.Begin(context.Background(), idem.BeginRequest{Key: key, Lease: time.Minute}); err != nil || o.Outcome != idem.Acquired {
		t.Fatal(err)
	}
	s := &stallingStore{Store: mem}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := idem.Do(ctx, s, key, &idem.Options{Wait: true, PollInterval: time.Millisecond}, func(context.Context) (int, error) { return 0, nil })
	if !errors.Is(err, idem.ErrInFlight) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait, deadline during a poll = %v; want ErrInFlight and DeadlineExceeded", err)
	}
	if n := s.begins.Load(); n < 2 {
		t.Fatalf("%d Begin calls: the deadline did not fall during a poll", n)
	}
}

func TestDoRejectsZeroKey(t *testing.T) {
	t.Parallel()
	_, err := idem.Do(context.Background(), newMem(t), idem.Key{}, nil, func(context.Context) (int, error) { return 0, nil })
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("Do(zero key) = %v", err)
	}
}

// The root package is the domain: it must not pull in HTTP, SQL or Redis,
// nor any module outside the standard library. Its own internal packages
// (internal/jsonscan) are listed with their dependencies, so they are
// held to the same rule.
func TestRootDependsOnNothingHeavy(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "github.com/idemkit/idem").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) { // non-standard packages only
		if dep != "github.com/idemkit/idem" && !strings.HasPrefix(dep, "github.com/idemkit/idem/internal/") {
			t.Errorf("root package depends on %s", dep)
		}
	}
}

func TestRootAvoidsHeavyStandardPackages(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "github.com/idemkit/idem").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "net/http" || dep == "database/sql" || dep == "net" {
			t.Errorf("root package depends on %s", dep)
		}
	}
}

func TestDoResultTellsReplays(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	defer s.Close()
	key := idem.MustKey("t", "do-result")
	runs := 0
	fn := func(ctx context.Context) (int, error) { runs++; return 42, nil }
	first, err := idem.DoResult(context.Background(), s, key, nil, fn)
	if err != nil || first.Value != 42 || first.Replayed || first.Fence == 0 {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := idem.DoResult(context.Background(), s, key, nil, fn)
	if err != nil || again.Value != 42 || !again.Replayed || again.Fence != 0 || runs != 1 {
		t.Fatalf("again: %+v, %v (runs %d)", again, err, runs)
	}
}

// TestDoResultConcurrent: of many concurrent callers (waiting for the
// first), exactly one ran fn and says so; every other one got a replay.
func TestDoResultConcurrent(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	defer s.Close()
	key := idem.MustKey("t", "do-result-concurrent")
	var runs, fresh, replayed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := idem.DoResult(context.Background(), s, key, &idem.Options{Wait: true, PollInterval: time.Millisecond},
				func(ctx context.Context) (string, error) {
					runs.Add(1)
					time.Sleep(20 * time.Millisecond)
					return "ok", nil
				})
			switch {
			case err != nil:
				t.Error(err)
			case r.Replayed:
				replayed.Add(1)
			default:
				fresh.Add(1)
			}
		}()
	}
	wg.Wait()
	if runs.Load() != 1 || fresh.Load() != 1 || replayed.Load() != 31 {
		t.Fatalf("runs %d, fresh %d, replayed %d", runs.Load(), fresh.Load(), replayed.Load())
	}
}

// A result that cannot be encoded after fn ran leaves the key not
// replayable: fn never runs again for it.
func TestDoUnencodableResultIsNotReplayable(t *testing.T) {
	t.Parallel()
	s := newMem(t)
	key := idem.MustKey("t", "unencodable")
	runs := 0
	fn := func(context.Context) (func(), error) { runs++; return func() {}, nil }
	if _, err := idem.Do(context.Background(), s, key, nil, fn); !errors.Is(err, idem.ErrNotReplayable) {
		t.Fatalf("first = %v, want ErrNotReplayable", err)
	}
	if _, err := idem.Do(context.Background(), s, key, nil, fn); !errors.Is(err, idem.ErrNotReplayable) {
		t.Fatalf("retry = %v, want ErrNotReplayable", err)
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times", runs)
	}
}

// isClosed reports whether ch is closed.
func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
