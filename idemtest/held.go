package idemtest

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// testHeldIsState: Store.Hold keeps StateHeld as the record's state,
// whatever its result: a result no writer ever marked held reads as held
// in Get, replays like a completed one, and refuses another request.
// Complete with the same bytes is completed: the bytes decide nothing.
func testHeldIsState(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	result := []byte(`{"status":"unknown, ask the bank"}`)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("held")}
	c := mustBegin(t, s, req, idem.Acquired)
	if err := s.Hold(ctx, c.Owner, result); err != nil {
		t.Fatalf("Hold: %v", err)
	}
	rec := mustGet(t, s, req.Key)
	if rec.State != idem.StateHeld || !bytes.Equal(rec.Result, result) || rec.Fence != c.Owner.Fence || rec.Started {
		t.Fatalf("record after Hold = %+v; want StateHeld with the result, fence %d, not started", rec, c.Owner.Fence)
	}
	if !rec.LeaseUntil.IsZero() {
		t.Errorf("held record has a lease until %v, want none", rec.LeaseUntil)
	}
	if r := mustBegin(t, s, req, idem.Replay); !bytes.Equal(r.Result, result) {
		t.Fatalf("replay of a held record = %q, want %q", r.Result, result)
	}
	mustBegin(t, s, idem.BeginRequest{Key: req.Key, Fingerprint: fp("other")}, idem.Mismatch)

	done := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("done")}
	dc := mustBegin(t, s, done, idem.Acquired)
	if err := s.Complete(ctx, dc.Owner, result); err != nil {
		t.Fatal(err)
	}
	if rec := mustGet(t, s, done.Key); rec.State != idem.StateCompleted {
		t.Fatalf("record completed with the same bytes = %v, want completed", rec.State)
	}
}

// testHoldOwnerOnly: only the owner holds; the first finishing call of the
// owner wins, and repeating it (after a lost answer) succeeds and changes
// nothing, so that a replay already served never changes.
func testHoldOwnerOnly(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)

	// Not an owner: zero, forged, released, or fenced out by a takeover.
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a")}
	c := mustBegin(t, s, req, idem.Acquired)
	forged := c.Owner
	forged.Token = idem.NewToken()
	for name, o := range map[string]idem.Owner{"zero": {}, "forged": forged} {
		if err := s.Hold(ctx, o, []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Hold by a %s owner = %v, want ErrLeaseLost", name, err)
		}
	}
	if rec := mustGet(t, s, req.Key); rec.State != idem.StateInProgress {
		t.Fatalf("record after refused Holds = %v, want in progress", rec.State)
	}
	if err := s.Release(ctx, c.Owner); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(ctx, c.Owner, []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Hold after Release = %v, want ErrLeaseLost", err)
	}
	if rec := mustGet(t, s, req.Key); rec.State != idem.StateReleased {
		t.Fatalf("record after a refused Hold = %v, want released", rec.State)
	}

	short := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: time.Hour}
	stale := mustBegin(t, s, short, idem.Acquired).Owner
	taken := eventually(t, s, short, idem.Acquired)
	if err := s.Hold(ctx, stale, []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Hold by a fenced-out owner = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, taken.Owner, []byte("new")); err != nil {
		t.Fatalf("Complete by the new owner: %v", err)
	}
	if rec := mustGet(t, s, short.Key); rec.State != idem.StateCompleted || string(rec.Result) != "new" {
		t.Fatalf("record = %v %q, want completed with the new owner's result", rec.State, rec.Result)
	}

	// Repeated and crossed finishing calls keep the first outcome.
	for _, first := range []string{"Hold", "Complete"} {
		req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a")}
		o := mustBegin(t, s, req, idem.Acquired).Owner
		finish := map[string]func([]byte) error{
			"Hold":     func(b []byte) error { return s.Hold(ctx, o, b) },
			"Complete": func(b []byte) error { return s.Complete(ctx, o, b) },
		}
		want := idem.StateHeld
		if first == "Complete" {
			want = idem.StateCompleted
		}
		if err := finish[first]([]byte("first")); err != nil {
			t.Fatal(err)
		}
		for _, then := range []string{"Hold", "Complete"} {
			if err := finish[then]([]byte(then)); err != nil {
				t.Errorf("%s after the owner's %s = %v, want nil", then, first, err)
			}
		}
		if err := s.Release(ctx, o); !errors.Is(err, idem.ErrLeaseLost) {
			t.Errorf("Release after %s = %v, want ErrLeaseLost", first, err)
		}
		if rec := mustGet(t, s, req.Key); rec.State != want || string(rec.Result) != "first" {
			t.Errorf("after %s then both: %v %q, want %v %q", first, rec.State, rec.Result, want, "first")
		}
		if r := mustBegin(t, s, req, idem.Replay); string(r.Result) != "first" {
			t.Errorf("after %s then both: replay %q, want %q", first, r.Result, "first")
		}
	}
}

// testHeldExpiryClears: a held record whose retention ran out is free, and
// the claim acquired afresh is not held: in progress, then completed (or
// held again) by what its own owner calls.
func testHeldExpiryClears(t *testing.T, h Harness) {
	s := h.New(t)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("a"), Lease: shortLease, Retention: shortRetention}
	o := mustBegin(t, s, req, idem.Acquired).Owner
	if err := s.MarkStarted(ctx, o); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(ctx, o, idem.OutcomeUnknownResult()); err != nil {
		t.Fatal(err)
	}
	again := req // the new claim lasts: no timing on a busy machine
	again.Lease, again.Retention = time.Minute, time.Hour
	c := eventually(t, s, again, idem.Acquired)
	if c.Takeover || c.Started || c.Owner.Fence <= o.Fence {
		t.Fatalf("claim after a held record expired = %+v; want a fresh claim above fence %d", c, o.Fence)
	}
	if rec := mustGet(t, s, req.Key); rec.State != idem.StateInProgress {
		t.Fatalf("record acquired after a held one expired = %v, want in progress", rec.State)
	}
	result := []byte("done")
	if err := s.Complete(ctx, c.Owner, result); err != nil {
		t.Fatal(err)
	}
	if rec := mustGet(t, s, req.Key); rec.State != idem.StateCompleted || !bytes.Equal(rec.Result, result) {
		t.Fatalf("record completed after a held one expired = %v %q, want completed", rec.State, rec.Result)
	}
}

// testHoldRacesComplete races, on each of 32 keys, the owner's Hold and
// Complete (an adapter's two finishing calls, as a retry after a lost
// answer can cross them) and Begins: exactly one outcome is stored, whole
// (held with Hold's result, or completed with Complete's), both calls
// succeed, and every replay is that outcome's result.
func testHoldRacesComplete(t *testing.T, h Harness) {
	s := h.New(t)
	const keys, readers = 32, 3
	held, completed := []byte("held: outcome unknown"), []byte("completed")
	var wg sync.WaitGroup
	type race struct {
		req     idem.BeginRequest
		mu      sync.Mutex
		replays [][]byte
	}
	races := make([]*race, keys)
	for k := range races {
		r := &race{req: idem.BeginRequest{Key: newKey(t), Fingerprint: fp("race")}}
		races[k] = r
		o := mustBegin(t, s, r.req, idem.Acquired).Owner
		start := make(chan struct{})
		wg.Add(2 + readers)
		for _, call := range []func() error{
			func() error { return s.Hold(ctxT(t), o, held) },
			func() error { return s.Complete(ctxT(t), o, completed) },
		} {
			go func() {
				defer wg.Done()
				<-start
				if err := call(); err != nil {
					t.Errorf("key %d: owner's finishing call: %v", k, err)
				}
			}()
		}
		for range readers {
			go func() {
				defer wg.Done()
				<-start
				c, err := s.Begin(ctxT(t), r.req)
				if err != nil {
					t.Errorf("key %d: Begin: %v", k, err)
					return
				}
				if c.Outcome == idem.Replay {
					r.mu.Lock()
					r.replays = append(r.replays, c.Result)
					r.mu.Unlock()
				}
			}()
		}
		close(start)
	}
	wg.Wait()
	for k, r := range races {
		rec := mustGet(t, s, r.req.Key)
		var want []byte
		switch rec.State {
		case idem.StateHeld:
			want = held
		case idem.StateCompleted:
			want = completed
		default:
			t.Fatalf("key %d: record %v after the owner's Hold and Complete", k, rec.State)
		}
		if !bytes.Equal(rec.Result, want) {
			t.Errorf("key %d: %v with result %q, want %q", k, rec.State, rec.Result, want)
		}
		for _, got := range append(r.replays, mustBegin(t, s, r.req, idem.Replay).Result) {
			if !bytes.Equal(got, want) {
				t.Errorf("key %d: replayed %q of a record %v with %q", k, got, rec.State, want)
			}
		}
	}
}
