package idemtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// Harness tells the suite how to make stores.
type Harness struct {
	// New returns an empty store isolated from every other call (its own
	// table, schema or key prefix). Required. The suite calls it once per
	// case, and cases run in parallel.
	New func(t *testing.T) idem.Store

	// Unreachable returns a store pointed at a server that does not answer
	// (a closed port). Every operation must fail with an error for which
	// idem.IsUnavailable is true. Nil only for stores without I/O, such as
	// an in-process map.
	Unreachable func(t *testing.T) idem.Store

	// Concurrency is how many goroutines race for one key; 0 means 200.
	Concurrency int

	// NativeExpiry is set by stores whose server deletes expired records by
	// itself (Redis TTLs). The Purge cases then check that expired records
	// vanish without Purge, and that Purge never deletes a live one.
	NativeExpiry bool
}

// Expiry settings used by the cases that wait for a lease or a record to
// run out. Long enough that a loaded machine does not expire a claim
// between two adjacent calls, short enough to keep the suite quick.
const (
	shortLease     = 300 * time.Millisecond
	shortRetention = 600 * time.Millisecond
	waitLimit      = 15 * time.Second
)

// RunStore runs the conformance suite against h.
func RunStore(t *testing.T, h Harness) {
	t.Helper()
	if h.New == nil {
		t.Fatal("idemtest: Harness.New is required")
	}
	if h.Concurrency == 0 {
		h.Concurrency = 200
	}
	cases := []struct {
		name string
		run  func(t *testing.T, h Harness)
	}{
		{"AcquireCompleteReplay", testAcquireCompleteReplay},
		{"Mismatch", testMismatch},
		{"InFlight", testInFlight},
		{"ConcurrentBeginOneWinner", testConcurrentBegin},
		{"ConcurrentReplay", testConcurrentReplay},
		{"TakeoverFencesOutStaleOwner", testTakeover},
		{"RejectedDuplicateCannotRelease", testForgedOwner},
		{"ExtendKeepsClaim", testExtend},
		{"ReleaseFreesKey", testRelease},
		{"CompleteIsIdempotentForOwner", testCompleteTwice},
		{"RetentionExpiryFreesKey", testRetention},
		{"ExtremeRetentionOneOwner", testExtremeRetention},
		{"ExtremeLeaseOneOwner", testExtremeLease},
		{"ExtendByExtremeKeepsClaim", testExtendExtreme},
		{"FenceGrowsAcrossPurge", testFenceAcrossPurge},
		{"PurgeOnlyExpiredInBatches", testPurge},
		{"PurgeRacesReinsert", testPurgeRace},
		{"ScopesAreIndependent", testScopes},
		{"LargeResult", testLargeResult},
		{"EmptyResult", testEmptyResult},
		{"InvalidRequest", testInvalid},
		{"ContextCancelled", testContext},
		{"DoRunsOnce", testDo},
		{"MarkStarted", testMarkStarted},
		{"MarkStartedNonOwner", testMarkStartedNonOwner},
		{"StartedSurvivesTakeover", testStartedSurvivesTakeover},
		{"StartedClearedByReleaseAndExpiry", testStartedCleared},
		{"MarkStartedRacesTakeover", testMarkStartedRacesTakeover},
		{"HeldIsState", testHeldIsState},
		{"HoldOwnerOnly", testHoldOwnerOnly},
		{"HeldExpiryClears", testHeldExpiryClears},
		{"HoldRacesComplete", testHoldRacesComplete},
		{"ResolveOnlyHeld", testResolveOnlyHeld},
		{"ResolveExpiredHeld", testResolveExpired},
		{"ResolveRacesTakeoverAndBegin", testResolveRaces},
		{"ListHeld", testListHeld},
		{"Unreachable", testUnreachable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, h)
		})
	}
}

var keySeq atomic.Uint64

// newKey returns a key unique to this process run.
func newKey(t *testing.T) idem.Key {
	t.Helper()
	var b [8]byte
	_, _ = rand.Read(b[:])
	return idem.MustKey("tenant-a", fmt.Sprintf("k-%x-%d", b, keySeq.Add(1)))
}

func fp(s string) idem.Fingerprint { return idem.FingerprintOf([]byte(s)) }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// completeShort begins and completes req, a request with a short lease,
// and returns the owner that completed it. When the lease ran out before
// the Complete (a slow machine stalls longer than shortLease), the key was
// free again: it is begun anew, up to ten times.
func completeShort(t *testing.T, s idem.Store, req idem.BeginRequest, result []byte) idem.Owner {
	t.Helper()
	for attempt := 1; ; attempt++ {
		o := mustBegin(t, s, req, idem.Acquired).Owner
		err := s.Complete(ctxT(t), o, result)
		if err == nil {
			return o
		}
		if !errors.Is(err, idem.ErrLeaseLost) || attempt == 10 {
			t.Fatalf("Complete(%v): %v", req.Key, err)
		}
	}
}

func mustBegin(t *testing.T, s idem.Store, req idem.BeginRequest, want idem.Outcome) idem.Claim {
	t.Helper()
	c, err := s.Begin(ctxT(t), req)
	if err != nil {
		t.Fatalf("Begin(%v): %v", req.Key, err)
	}
	if c.Outcome != want {
		t.Fatalf("Begin(%v) = %v, want %v", req.Key, c.Outcome, want)
	}
	return c
}

// eventually calls Begin until it returns want (or fails after waitLimit).
func eventually(t *testing.T, s idem.Store, req idem.BeginRequest, want idem.Outcome) idem.Claim {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		c, err := s.Begin(ctxT(t), req)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		if c.Outcome == want {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("Begin still %v after %v, want %v", c.Outcome, waitLimit, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func testAcquireCompleteReplay(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a")}
	c := mustBegin(t, s, req, idem.Acquired)
	if c.Owner.Fence == 0 {
		t.Errorf("fence = 0, want > 0")
	}
	if c.Takeover {
		t.Errorf("first claim reported as takeover")
	}
	if c.Owner.Key != req.Key {
		t.Errorf("owner key = %v, want %v", c.Owner.Key, req.Key)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil {
		t.Fatalf("Get in progress: %v", err)
	}
	if rec.State != idem.StateInProgress || rec.Fingerprint != req.Fingerprint || rec.Fence != c.Owner.Fence || rec.Digest != req.Key.Digest() {
		t.Errorf("in-progress record = %+v", rec)
	}
	if !rec.LeaseUntil.After(rec.CreatedAt) || !rec.ExpiresAt.After(rec.CreatedAt) {
		t.Errorf("record times: created %v lease %v expires %v", rec.CreatedAt, rec.LeaseUntil, rec.ExpiresAt)
	}
	result := []byte(`{"id":"ch_1","amount":100}`)
	if err := s.Complete(ctx, c.Owner, result); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	r := mustBegin(t, s, req, idem.Replay)
	if !bytes.Equal(r.Result, result) {
		t.Errorf("replayed %q, want %q", r.Result, result)
	}
	rec, err = s.Get(ctx, req.Key)
	if err != nil {
		t.Fatalf("Get completed: %v", err)
	}
	if rec.State != idem.StateCompleted || !bytes.Equal(rec.Result, result) || rec.Fence != c.Owner.Fence {
		t.Errorf("completed record = %+v", rec)
	}
	if _, err := s.Get(ctx, newKey(t)); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Get(unknown) = %v, want ErrNotFound", err)
	}
}

func testMismatch(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	key := newKey(t)
	c := mustBegin(t, s, idem.BeginRequest{Key: key, Fingerprint: fp("a")}, idem.Acquired)
	m := mustBegin(t, s, idem.BeginRequest{Key: key, Fingerprint: fp("b")}, idem.Mismatch)
	if !errors.Is(m.Err(), idem.ErrMismatch) {
		t.Errorf("Mismatch claim Err() = %v", m.Err())
	}
	if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	mustBegin(t, s, idem.BeginRequest{Key: key, Fingerprint: fp("b")}, idem.Mismatch)
	mustBegin(t, s, idem.BeginRequest{Key: key}, idem.Mismatch) // no fingerprint is a different one
	mustBegin(t, s, idem.BeginRequest{Key: key, Fingerprint: fp("a")}, idem.Replay)
}

func testInFlight(t *testing.T, h Harness) {
	s := h.New(t)
	lease := 20 * time.Second
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: lease}
	mustBegin(t, s, req, idem.Acquired)
	c := mustBegin(t, s, req, idem.InFlight)
	if c.RetryAfter <= 0 || c.RetryAfter > lease {
		t.Errorf("RetryAfter = %v, want in (0, %v]", c.RetryAfter, lease)
	}
	var inflight *idem.InFlightError
	if err := c.Err(); !errors.Is(err, idem.ErrInFlight) || !errors.As(err, &inflight) {
		t.Errorf("InFlight claim Err() = %v", err)
	}
	if c.Owner != (idem.Owner{}) {
		t.Errorf("in-flight claim carries an owner: %+v", c.Owner)
	}
}

func testConcurrentBegin(t *testing.T, h Harness) {
	s := h.New(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute}
	var acquired, inflight atomic.Int32
	var errs sync.Map
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < h.Concurrency; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := s.Begin(context.Background(), req)
			switch {
			case err != nil:
				errs.Store(err.Error(), true)
			case c.Outcome == idem.Acquired:
				acquired.Add(1)
			case c.Outcome == idem.InFlight:
				inflight.Add(1)
			default:
				errs.Store("unexpected outcome "+c.Outcome.String(), true)
			}
		}()
	}
	close(start)
	wg.Wait()
	errs.Range(func(k, _ any) bool { t.Errorf("Begin: %v", k); return true })
	if acquired.Load() != 1 || int(inflight.Load()) != h.Concurrency-1 {
		t.Fatalf("%d goroutines: %d acquired, %d in flight; want exactly 1 acquired", h.Concurrency, acquired.Load(), inflight.Load())
	}
}

func testConcurrentReplay(t *testing.T, h Harness) {
	s := h.New(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a")}
	c := mustBegin(t, s, req, idem.Acquired)
	if err := s.Complete(ctxT(t), c.Owner, []byte("done")); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var bad atomic.Int32
	for i := 0; i < h.Concurrency/4+1; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := s.Begin(context.Background(), req)
			if err != nil || r.Outcome != idem.Replay || string(r.Result) != "done" {
				bad.Add(1)
			}
		}()
	}
	wg.Wait()
	if bad.Load() != 0 {
		t.Fatalf("%d concurrent replays did not replay the stored result", bad.Load())
	}
}

func testTakeover(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	old := mustBegin(t, s, req, idem.Acquired).Owner
	// The holder "dies": no renewal. A retry takes over once the lease ran out.
	c := eventually(t, s, req, idem.Acquired)
	if !c.Takeover {
		t.Errorf("claim after lease expiry not reported as takeover")
	}
	if c.Owner.Fence <= old.Fence {
		t.Errorf("takeover fence %d, want > stale fence %d", c.Owner.Fence, old.Fence)
	}
	if c.Owner.Token == old.Token {
		t.Errorf("takeover reused the stale owner's token")
	}
	// The stale owner wakes up: every write it attempts is refused.
	if err := s.Complete(ctx, old, []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Release(ctx, old); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale Release = %v, want ErrLeaseLost", err)
	}
	if err := s.Extend(ctx, old, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale Extend = %v, want ErrLeaseLost", err)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != idem.StateInProgress || rec.Fence != c.Owner.Fence || len(rec.Result) != 0 {
		t.Errorf("new owner's record disturbed by stale owner: %+v", rec)
	}
	if err := s.Complete(ctx, c.Owner, []byte("fresh")); err != nil {
		t.Fatalf("new owner Complete: %v", err)
	}
	if err := s.Complete(ctx, old, []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("stale Complete after new owner completed = %v, want ErrLeaseLost", err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "fresh" {
		t.Errorf("replay = %q, want the new owner's result", r.Result)
	}
	// A different fingerprint never takes over, even after the lease.
	req2 := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	mustBegin(t, s, req2, idem.Acquired)
	time.Sleep(2 * shortLease)
	req2.Fingerprint = fp("b")
	mustBegin(t, s, req2, idem.Mismatch)
}

func testForgedOwner(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute}
	orig := mustBegin(t, s, req, idem.Acquired).Owner
	dup := mustBegin(t, s, req, idem.InFlight)
	// A rejected duplicate has no owner; whatever it passes is refused.
	for _, o := range []idem.Owner{dup.Owner, {Key: req.Key, Token: idem.NewToken(), Fence: orig.Fence}} {
		if err := s.Release(ctx, o); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Release by non-owner = %v, want ErrLeaseLost", err)
		}
		if err := s.Complete(ctx, o, []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Complete by non-owner = %v, want ErrLeaseLost", err)
		}
	}
	// The original's claim is intact.
	mustBegin(t, s, req, idem.InFlight)
	if err := s.Complete(ctx, orig, []byte("ok")); err != nil {
		t.Fatalf("original Complete: %v", err)
	}
	// An owner of another key cannot touch this one.
	other := mustBegin(t, s, idem.BeginRequest{Key: newKey(t), Lease: time.Minute}, idem.Acquired).Owner
	other.Key = req.Key
	if err := s.Release(ctx, other); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Release with another key's token = %v, want ErrLeaseLost", err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "ok" {
		t.Errorf("replay = %q", r.Result)
	}
}

func testExtend(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	owner := mustBegin(t, s, req, idem.Acquired).Owner
	// Renew for four leases' worth of time; a retry must never take over.
	// Each renewal asks for a lease longer than the gap to the next one, so
	// the claim stays live however slow this machine is between the calls.
	end := time.Now().Add(4 * shortLease)
	for time.Now().Before(end) {
		if err := s.Extend(ctx, owner, 10*shortLease); err != nil {
			t.Fatalf("Extend: %v", err)
		}
		c := mustBegin(t, s, req, idem.InFlight)
		if c.RetryAfter <= shortLease {
			t.Fatalf("RetryAfter %v after Extend(%v), want > %v", c.RetryAfter, 10*shortLease, shortLease)
		}
		time.Sleep(shortLease / 3)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Fence != owner.Fence {
		t.Errorf("fence changed by Extend: %d → %d", owner.Fence, rec.Fence)
	}
	if err := s.Complete(ctx, owner, []byte("done")); err != nil {
		t.Fatalf("Complete after extends: %v", err)
	}
	if err := s.Extend(ctx, owner, time.Minute); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Extend of a completed record = %v, want ErrLeaseLost", err)
	}
}

func testRelease(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: time.Minute}
	first := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.Release(ctx, first); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := s.Release(ctx, first); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("second Release = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, first, []byte("late")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Complete after Release = %v, want ErrLeaseLost", err)
	}
	// A released key is free again, for the same request or another one.
	req.Fingerprint = fp("b")
	second := mustBegin(t, s, req, idem.Acquired)
	if second.Owner.Fence <= first.Fence {
		t.Errorf("fence after release %d, want > %d", second.Owner.Fence, first.Fence)
	}
	if second.Takeover {
		t.Errorf("claim of a released key reported as takeover")
	}
	if err := s.Complete(ctx, second.Owner, []byte("b")); err != nil {
		t.Fatal(err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "b" {
		t.Errorf("replay = %q", r.Result)
	}
}

func testCompleteTwice(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a")}
	owner := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.Complete(ctx, owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	// A Complete whose answer was lost (timeout) is retried by its owner;
	// the first result stays, so replays already served never change.
	if err := s.Complete(ctx, owner, []byte("r2")); err != nil {
		t.Fatalf("owner's repeated Complete = %v, want nil", err)
	}
	if err := s.Release(ctx, owner); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Release of a completed record = %v, want ErrLeaseLost", err)
	}
	if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "r" {
		t.Errorf("replay = %q", r.Result)
	}
}

func testRetention(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: shortRetention}
	first := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.Complete(ctx, first, []byte("old")); err != nil {
		t.Fatal(err)
	}
	// After retention the key is new again, also for another request.
	req.Fingerprint = fp("other")
	deadline := time.Now().Add(waitLimit)
	var c idem.Claim
	for {
		var err error
		c, err = s.Begin(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == idem.Acquired {
			break
		}
		if c.Outcome != idem.Mismatch || time.Now().After(deadline) {
			t.Fatalf("Begin with another fingerprint = %v before expiry; want Mismatch, then Acquired", c.Outcome)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if c.Takeover {
		t.Errorf("claim of an expired record reported as takeover")
	}
	if c.Owner.Fence <= first.Fence {
		t.Errorf("fence %d after expiry, want > %d", c.Owner.Fence, first.Fence)
	}
	rec, err := s.Get(ctx, req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != idem.StateInProgress || len(rec.Result) != 0 || rec.Fingerprint != req.Fingerprint {
		t.Errorf("record after re-acquire kept old data: %+v", rec)
	}
}

func testFenceAcrossPurge(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: shortLease}
	first := completeShort(t, s, req, nil)
	deadline := time.Now().Add(waitLimit)
	for {
		if _, err := s.Purge(ctx, 0, 100); err != nil {
			t.Fatalf("Purge: %v", err)
		}
		if _, err := s.Get(ctx, req.Key); errors.Is(err, idem.ErrNotFound) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("expired record never purged")
		}
		time.Sleep(20 * time.Millisecond)
	}
	second := mustBegin(t, s, req, idem.Acquired).Owner
	if second.Fence <= first.Fence {
		t.Errorf("fence after purge %d, want > %d", second.Fence, first.Fence)
	}
}

func testPurge(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	const expired, live = 7, 3
	var liveKeys, expiredKeys []idem.Key
	for i := 0; i < expired+live; i++ {
		req := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: shortLease}
		if i >= expired {
			req.Retention = time.Hour
			liveKeys = append(liveKeys, req.Key)
		} else {
			expiredKeys = append(expiredKeys, req.Key)
		}
		if i%2 == 0 { // both completed and abandoned records expire
			completeShort(t, s, req, []byte("x"))
		} else {
			mustBegin(t, s, req, idem.Acquired)
		}
	}
	// Nothing has expired by a grace of an hour.
	if n, err := s.Purge(ctx, time.Hour, 2); err != nil || n != 0 {
		t.Fatalf("Purge(grace 1h) = %d, %v; want 0", n, err)
	}
	deadline := time.Now().Add(waitLimit)
	if h.NativeExpiry {
		for _, k := range expiredKeys {
			for {
				if _, err := s.Purge(ctx, 0, 2); err != nil {
					t.Fatalf("Purge: %v", err)
				}
				if _, err := s.Get(ctx, k); errors.Is(err, idem.ErrNotFound) {
					break
				} else if err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("expired record %v still stored after %v", k, waitLimit)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	} else {
		var total int64
		for total < expired {
			n, err := s.Purge(ctx, 0, 2) // batches of 2 must still delete all
			if err != nil {
				t.Fatalf("Purge: %v", err)
			}
			total += n
			if time.Now().After(deadline) {
				t.Fatalf("purged %d of %d expired records", total, expired)
			}
			time.Sleep(20 * time.Millisecond)
		}
		if total != expired {
			t.Errorf("purged %d records, want %d", total, expired)
		}
	}
	for _, k := range liveKeys {
		if _, err := s.Get(ctx, k); err != nil {
			t.Errorf("live record %v: %v", k, err)
		}
	}
	if n, err := s.Purge(ctx, 0, 2); err != nil || n != 0 {
		t.Errorf("second Purge = %d, %v; want 0", n, err)
	}
}

func testPurgeRace(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	const n = 40
	keys := make([]idem.Key, n)
	for i := range keys {
		keys[i] = newKey(t)
		completeShort(t, s, idem.BeginRequest{Key: keys[i], Lease: shortLease, Retention: shortLease}, []byte("old"))
	}
	// Wait until every record has expired (a new Begin acquires), without
	// consuming the keys: probe with a separate key of the same age.
	probe := idem.BeginRequest{Key: newKey(t), Lease: shortLease, Retention: shortLease}
	completeShort(t, s, probe, nil)
	eventually(t, s, probe, idem.Acquired)

	// Re-insert every key while purges run; no re-inserted record may be lost.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var purgeErr atomic.Value
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.Purge(ctx, 0, 3); err != nil {
					purgeErr.Store(err)
					return
				}
			}
		}()
	}
	for _, k := range keys {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: k, Fingerprint: fp("new"), Lease: time.Minute, Retention: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome != idem.Acquired {
			t.Fatalf("Begin on expired key = %v, want Acquired", c.Outcome)
		}
		if err := s.Complete(ctx, c.Owner, []byte("new")); err != nil {
			t.Fatalf("Complete of re-inserted key: %v", err)
		}
	}
	close(stop)
	wg.Wait()
	if err, _ := purgeErr.Load().(error); err != nil {
		t.Fatalf("Purge: %v", err)
	}
	for _, k := range keys {
		r := mustBegin(t, s, idem.BeginRequest{Key: k, Fingerprint: fp("new")}, idem.Replay)
		if string(r.Result) != "new" {
			t.Errorf("re-inserted record replays %q", r.Result)
		}
	}
}

func testScopes(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	a := idem.MustKey("tenant-a", "same-key")
	b := idem.MustKey("tenant-b", "same-key")
	// Run in a fresh namespace: the ids are fixed, so isolate by scope suffix.
	suffix := newKey(t).ID()
	a = idem.MustKey(a.Scope()+suffix, a.ID())
	b = idem.MustKey(b.Scope()+suffix, b.ID())
	oa := mustBegin(t, s, idem.BeginRequest{Key: a, Fingerprint: fp("x")}, idem.Acquired).Owner
	ob := mustBegin(t, s, idem.BeginRequest{Key: b, Fingerprint: fp("y")}, idem.Acquired).Owner
	if err := s.Complete(ctx, oa, []byte("A")); err != nil {
		t.Fatal(err)
	}
	// b is still in flight; a's completion did not touch it.
	mustBegin(t, s, idem.BeginRequest{Key: b, Fingerprint: fp("y")}, idem.InFlight)
	if err := s.Complete(ctx, ob, []byte("B")); err != nil {
		t.Fatal(err)
	}
	if r := mustBegin(t, s, idem.BeginRequest{Key: a, Fingerprint: fp("x")}, idem.Replay); string(r.Result) != "A" {
		t.Errorf("scope a replays %q", r.Result)
	}
	if r := mustBegin(t, s, idem.BeginRequest{Key: b, Fingerprint: fp("y")}, idem.Replay); string(r.Result) != "B" {
		t.Errorf("scope b replays %q", r.Result)
	}
	// An owner from one scope cannot complete the other scope's record.
	oa.Key = b
	if err := s.Complete(ctx, oa, []byte("evil")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("cross-scope Complete = %v, want ErrLeaseLost", err)
	}
}

func testLargeResult(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	big := make([]byte, 8<<20)
	_, _ = rand.Read(big)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("big")}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.Complete(ctx, o, big); err != nil {
		t.Fatalf("Complete 8 MiB: %v", err)
	}
	r := mustBegin(t, s, req, idem.Replay)
	if !bytes.Equal(r.Result, big) {
		t.Fatalf("8 MiB result did not round-trip (got %d bytes)", len(r.Result))
	}
}

func testEmptyResult(t *testing.T, h Harness) {
	s := h.New(t)
	req := idem.BeginRequest{Key: newKey(t)}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.Complete(ctxT(t), o, nil); err != nil {
		t.Fatal(err)
	}
	if r := mustBegin(t, s, req, idem.Replay); len(r.Result) != 0 {
		t.Errorf("empty result replays as %q", r.Result)
	}
}

func testInvalid(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	if _, err := s.Begin(ctx, idem.BeginRequest{}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("Begin(zero key) = %v, want ErrInvalidKey", err)
	}
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: newKey(t), Lease: time.Hour, Retention: time.Minute}); err == nil {
		t.Errorf("Begin with retention < lease succeeded")
	}
	if _, err := s.Get(ctx, idem.Key{}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("Get(zero key) = %v, want ErrInvalidKey", err)
	}
}

func testContext(t *testing.T, h Harness) {
	s := h.New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := newKey(t)
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: key}); !errors.Is(err, context.Canceled) {
		t.Errorf("Begin(cancelled ctx) = %v, want context.Canceled", err)
	}
	o := mustBegin(t, s, idem.BeginRequest{Key: key}, idem.Acquired).Owner
	if err := s.Complete(ctx, o, []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Complete(cancelled ctx) = %v, want context.Canceled", err)
	}
	if _, err := s.Get(ctx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("Get(cancelled ctx) = %v, want context.Canceled", err)
	}
	// The cancelled Complete changed nothing: the owner can still finish.
	if err := s.Complete(ctxT(t), o, []byte("y")); err != nil {
		t.Fatalf("Complete after cancelled attempt: %v", err)
	}
}

func testDo(t *testing.T, h Harness) {
	s := h.New(t)
	key := newKey(t)
	var runs atomic.Int32
	release := make(chan struct{})
	type receipt struct{ ID string }
	var wg sync.WaitGroup
	results := make(chan receipt, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			r, err := idem.Do(ctx, s, key, &idem.Options{Wait: true}, func(ctx context.Context) (receipt, error) {
				runs.Add(1)
				<-release
				return receipt{ID: fmt.Sprintf("r-%d", idem.FenceFromContext(ctx))}, nil
			})
			if err != nil {
				t.Errorf("Do: %v", err)
				return
			}
			results <- r
		}()
	}
	time.Sleep(50 * time.Millisecond)
	close(release)
	wg.Wait()
	close(results)
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
	var first string
	for r := range results {
		if first == "" {
			first = r.ID
		}
		if r.ID != first || r.ID == "r-0" {
			t.Errorf("result %q, want every caller to get %q (with a fence)", r.ID, first)
		}
	}
}

func testUnreachable(t *testing.T, h Harness) {
	if h.Unreachable == nil {
		t.Log("store has no server to lose")
		return
	}
	s := h.Unreachable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	key := newKey(t)
	_, err := s.Begin(ctx, idem.BeginRequest{Key: key})
	if !idem.IsUnavailable(err) {
		t.Errorf("Begin on unreachable store = %v, want IsUnavailable", err)
	}
	owner := idem.Owner{Key: key, Token: idem.NewToken(), Fence: 1}
	checks := map[string]error{
		"Complete":    s.Complete(ctx, owner, []byte("x")),
		"Release":     s.Release(ctx, owner),
		"Extend":      s.Extend(ctx, owner, time.Second),
		"MarkStarted": s.MarkStarted(ctx, owner),
	}
	_, checks["Get"] = s.Get(ctx, key)
	_, checks["Purge"] = s.Purge(ctx, 0, 10)
	for op, err := range checks {
		if !idem.IsUnavailable(err) {
			t.Errorf("%s on unreachable store = %v, want IsUnavailable", op, err)
		}
	}
	if ctx.Err() != nil {
		t.Errorf("unreachable store hung until the test deadline")
	}
}
