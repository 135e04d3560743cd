package idemtest

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// The extreme-duration cases: a lease, a retention or an Extend of up to
// math.MaxInt64 nanoseconds (292 years) means "far in the future", whatever
// unit and origin the store's clock has. It must never wrap into the past,
// where a claim would look expired at once and a second caller would
// acquire the key.

// farDuration is one of the durations the extreme cases run with.
type farDuration struct {
	name string
	d    time.Duration
}

// farDurations returns the largest Duration, one nanosecond less (which
// overflows any clock past its origin), and a duration that fits a
// Duration but overflows when added to today's Unix time in nanoseconds.
func farDurations() []farDuration {
	return []farDuration{
		{"MaxInt64", math.MaxInt64},
		{"MaxInt64-1ns", math.MaxInt64 - 1},
		{"PastUnixNanoEnd", time.Duration(math.MaxInt64 - time.Now().UnixNano() + int64(time.Hour))},
	}
}

// farFuture is the least a far duration must leave of a record's lease or
// retention: the shortest of farDurations is over 230 years.
func farFuture() time.Time { return time.Now().AddDate(200, 0, 0) }

// raceOneOwner has n goroutines Begin req at once and fails unless exactly
// one acquires it and every other one finds it in flight.
func raceOneOwner(t *testing.T, s idem.Store, req idem.BeginRequest, n int) idem.Owner {
	t.Helper()
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		owners   []idem.Owner
		inflight atomic.Int32
		bad      atomic.Value
	)
	start := make(chan struct{})
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := s.Begin(context.Background(), req)
			switch {
			case err != nil:
				bad.Store(err.Error())
			case c.Outcome == idem.Acquired:
				mu.Lock()
				owners = append(owners, c.Owner)
				mu.Unlock()
			case c.Outcome == idem.InFlight && c.RetryAfter > 0:
				inflight.Add(1)
			default:
				bad.Store("outcome " + c.Outcome.String() + ", RetryAfter " + c.RetryAfter.String())
			}
		}()
	}
	close(start)
	wg.Wait()
	if msg, _ := bad.Load().(string); msg != "" {
		t.Fatalf("Begin: %s", msg)
	}
	if len(owners) != 1 || int(inflight.Load()) != n-1 {
		t.Fatalf("%d racing Begins: %d acquired, %d in flight; want exactly one owner", n, len(owners), inflight.Load())
	}
	return owners[0]
}

// checkInFlight asserts that the key of req is held by a live claim with
// far more than a lease left.
func checkInFlight(t *testing.T, s idem.Store, req idem.BeginRequest) {
	t.Helper()
	c := mustBegin(t, s, req, idem.InFlight)
	if c.RetryAfter < time.Hour {
		t.Errorf("RetryAfter = %v on a claim held for centuries, want more than an hour", c.RetryAfter)
	}
	rec := mustGet(t, s, req.Key)
	if rec.State != idem.StateInProgress || !rec.LeaseUntil.After(farFuture()) || rec.ExpiresAt.Before(rec.LeaseUntil) {
		t.Errorf("record = state %v, lease until %v, expires %v; want in progress, both more than 200 years ahead",
			rec.State, rec.LeaseUntil, rec.ExpiresAt)
	}
}

// checkCompletes completes owner's claim on req and checks that the
// record replays and stays: it has not expired.
func checkCompletes(t *testing.T, s idem.Store, req idem.BeginRequest, owner idem.Owner) {
	t.Helper()
	ctx := ctxT(t)
	if err := s.Complete(ctx, owner, []byte("done")); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "done" {
		t.Errorf("replay = %q, want %q", r.Result, "done")
	}
	other := req
	other.Fingerprint = fp("another request")
	mustBegin(t, s, other, idem.Mismatch) // a live record, not an expired one
	for _, grace := range []time.Duration{0, math.MaxInt64} {
		if _, err := s.Purge(ctx, grace, 100); err != nil {
			t.Fatalf("Purge(grace %v): %v", grace, err)
		}
	}
	if rec := mustGet(t, s, req.Key); rec.State != idem.StateCompleted || !rec.ExpiresAt.After(farFuture()) {
		t.Errorf("record after Complete and Purge = state %v, expires %v; want completed, more than 200 years ahead", rec.State, rec.ExpiresAt)
	}
}

func testExtremeRetention(t *testing.T, h Harness) {
	s := h.New(t)
	for _, fd := range farDurations() {
		t.Run(fd.name, func(t *testing.T) {
			req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute, Retention: fd.d}
			owner := raceOneOwner(t, s, req, h.Concurrency/10+2)
			c := mustBegin(t, s, req, idem.InFlight)
			if c.RetryAfter <= 0 || c.RetryAfter > time.Minute {
				t.Errorf("RetryAfter = %v, want in (0, 1m]", c.RetryAfter)
			}
			rec := mustGet(t, s, req.Key)
			if rec.State != idem.StateInProgress || !rec.ExpiresAt.After(farFuture()) {
				t.Errorf("record = state %v, expires %v; want in progress, more than 200 years ahead", rec.State, rec.ExpiresAt)
			}
			checkCompletes(t, s, req, owner)
		})
	}
}

func testExtremeLease(t *testing.T, h Harness) {
	s := h.New(t)
	for _, fd := range farDurations() {
		t.Run(fd.name, func(t *testing.T) {
			req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: fd.d, Retention: fd.d}
			owner := raceOneOwner(t, s, req, h.Concurrency/10+2)
			checkInFlight(t, s, req)
			checkCompletes(t, s, req, owner)
		})
	}
}

func testExtendExtreme(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	fds := farDurations()
	reqs := make([]idem.BeginRequest, len(fds))
	owners := make([]idem.Owner, len(fds))
	for i, fd := range fds {
		reqs[i] = idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
		owners[i] = mustBegin(t, s, reqs[i], idem.Acquired).Owner
		if err := s.Extend(ctx, owners[i], fd.d); err != nil {
			t.Fatalf("Extend(%s): %v", fd.name, err)
		}
	}
	// Past the lease the claims were begun with: only the Extend holds them.
	time.Sleep(2 * shortLease)
	for i, fd := range fds {
		t.Run(fd.name, func(t *testing.T) {
			checkInFlight(t, s, reqs[i])
			// Extending again, by as much, changes nothing.
			if err := s.Extend(ctx, owners[i], fd.d); err != nil {
				t.Fatalf("second Extend: %v", err)
			}
			checkInFlight(t, s, reqs[i])
			if rec := mustGet(t, s, reqs[i].Key); rec.Fence != owners[i].Fence {
				t.Errorf("fence changed by Extend: %d → %d", owners[i].Fence, rec.Fence)
			}
			checkCompletes(t, s, reqs[i], owners[i])
		})
	}
}
