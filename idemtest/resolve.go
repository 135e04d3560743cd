package idemtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// httpHeld is a held result as httpidem stores it (its encoding, version 1,
// flagged outcome-unknown: status 502, no headers, a short body). Held is
// the record's state, set by Store.Hold, whatever the result: the cases
// hold keys with what the two writers store (Do's outcome-unknown result,
// this) and with other bytes (held.go).
var httpHeld = []byte("ih\x01\x02\xf6\x03\x00\x02{}")

// resolver returns h's store as a Resolver, or nil (and says so) when the
// store has none: the resolve cases then have nothing to check.
func resolver(t *testing.T, h Harness) (idem.Store, idem.Resolver) {
	t.Helper()
	s := h.New(t)
	r, ok := s.(idem.Resolver)
	if !ok {
		t.Logf("%T does not implement idem.Resolver: no resolve cases", s)
		return nil, nil
	}
	return s, r
}

// hold makes a held record under a new key (Begin, MarkStarted, Hold), the
// way Do (result nil: its outcome-unknown result) or the HTTP middleware
// (result httpHeld) leaves one, and returns its request and fence.
func hold(t *testing.T, s idem.Store, result []byte) (idem.BeginRequest, uint64) {
	t.Helper()
	if result == nil {
		result = idem.OutcomeUnknownResult()
	}
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("held"), Retention: time.Hour}
	c := mustBegin(t, s, req, idem.Acquired)
	if err := s.MarkStarted(ctxT(t), c.Owner); err != nil {
		t.Fatal(err)
	}
	if err := s.Hold(ctxT(t), c.Owner, result); err != nil {
		t.Fatal(err)
	}
	return req, c.Owner.Fence
}

func testResolveOnlyHeld(t *testing.T, h Harness) {
	s, rs := resolver(t, h)
	if s == nil {
		return
	}
	ctx := ctxT(t)
	resolve := func(d idem.Digest, fence uint64, release bool, result []byte) error {
		return idem.Resolve(ctx, s, idem.Resolution{Digest: d, Fence: fence, Release: release, Result: result})
	}

	// Held records of both writers are StateHeld, in Get and Lookup.
	for name, marker := range map[string][]byte{"Do": nil, "HTTP": httpHeld} {
		req, fence := hold(t, s, marker)
		for how, get := range map[string]func() (idem.Record, error){
			"Get":    func() (idem.Record, error) { return s.Get(ctx, req.Key) },
			"Lookup": func() (idem.Record, error) { return rs.Lookup(ctx, req.Key.Digest()) },
		} {
			rec, err := get()
			if err != nil || rec.State != idem.StateHeld || rec.Fence != fence || !rec.Started {
				t.Fatalf("%s of a record held by %s = %+v, %v; want StateHeld, fence %d, started", how, name, rec, err, fence)
			}
		}
		// Held replays like any completed record until it is resolved.
		want := marker
		if want == nil {
			want = idem.OutcomeUnknownResult()
		}
		if c := mustBegin(t, s, req, idem.Replay); !bytes.Equal(c.Result, want) {
			t.Fatalf("replay of a held record = %q, want %q", c.Result, want)
		}
	}

	// Nothing but a held record, at its fence, can be resolved.
	inProgress := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("p")}
	ip := mustBegin(t, s, inProgress, idem.Acquired)
	completed := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("c")}
	co := mustBegin(t, s, completed, idem.Acquired)
	if err := s.Complete(ctx, co.Owner, []byte("receipt")); err != nil {
		t.Fatal(err)
	}
	released := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("r")}
	ro := mustBegin(t, s, released, idem.Acquired)
	if err := s.Release(ctx, ro.Owner); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		d       idem.Digest
		fence   uint64
		release bool
	}{
		{"in progress", inProgress.Key.Digest(), ip.Owner.Fence, false},
		{"in progress (release)", inProgress.Key.Digest(), ip.Owner.Fence, true},
		{"completed", completed.Key.Digest(), co.Owner.Fence, false},
		{"completed (release)", completed.Key.Digest(), co.Owner.Fence, true},
		{"released", released.Key.Digest(), ro.Owner.Fence, false},
	} {
		var result []byte
		if !c.release {
			result = []byte("x")
		}
		if err := resolve(c.d, c.fence, c.release, result); !errors.Is(err, idem.ErrNotHeld) {
			t.Errorf("Resolve of a %s record = %v, want ErrNotHeld", c.name, err)
		}
	}
	if err := resolve(newKey(t).Digest(), 1, true, nil); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("Resolve of no record = %v, want ErrNotFound", err)
	}
	// The records were left as they were.
	mustBegin(t, s, inProgress, idem.InFlight)
	if c := mustBegin(t, s, completed, idem.Replay); string(c.Result) != "receipt" {
		t.Fatalf("completed record after a refused Resolve replays %q", c.Result)
	}

	// Another fence is another record: refused, and the held one stays.
	req, fence := hold(t, s, nil)
	for _, f := range []uint64{fence - 1, fence + 1} {
		if err := resolve(req.Key.Digest(), f, true, nil); !errors.Is(err, idem.ErrNotHeld) {
			t.Fatalf("Resolve at fence %d of a record held at %d = %v, want ErrNotHeld", f, fence, err)
		}
	}
	if rec := mustGet(t, s, req.Key); rec.State != idem.StateHeld {
		t.Fatalf("held record after refused resolutions: %v", rec.State)
	}
	// A held result is no resolution.
	if err := resolve(req.Key.Digest(), fence, false, idem.OutcomeUnknownResult()); err == nil {
		t.Fatal("Resolve with the outcome-unknown marker as the result succeeded")
	}

	// Resolved with a result: every retry replays it; a resend succeeds and
	// changes nothing; a release afterwards is refused.
	for _, marker := range [][]byte{nil, httpHeld} {
		req, fence := hold(t, s, marker)
		result := []byte(`{"charge":"ch_9"}`)
		for range 2 {
			if err := resolve(req.Key.Digest(), fence, false, result); err != nil {
				t.Fatalf("Resolve with a result: %v", err)
			}
		}
		if c := mustBegin(t, s, req, idem.Replay); !bytes.Equal(c.Result, result) {
			t.Fatalf("replay after Resolve = %q, want %q", c.Result, result)
		}
		if rec := mustGet(t, s, req.Key); rec.State != idem.StateCompleted || rec.Fence != fence {
			t.Fatalf("record after Resolve = %v fence %d, want completed at fence %d", rec.State, rec.Fence, fence)
		}
		if err := resolve(req.Key.Digest(), fence, false, []byte("other")); !errors.Is(err, idem.ErrNotHeld) {
			t.Fatalf("second Resolve with another result = %v, want ErrNotHeld", err)
		}
		if err := resolve(req.Key.Digest(), fence, true, nil); !errors.Is(err, idem.ErrNotHeld) {
			t.Fatalf("release of a resolved record = %v, want ErrNotHeld", err)
		}
		mustBegin(t, s, idem.BeginRequest{Key: req.Key, Fingerprint: fp("other")}, idem.Mismatch)
	}

	// Released: the next Begin runs the work, with a greater fence and
	// without the Started mark; a resend of the release succeeds.
	req, fence = hold(t, s, httpHeld)
	for range 2 {
		if err := resolve(req.Key.Digest(), fence, true, nil); err != nil {
			t.Fatalf("Resolve release: %v", err)
		}
	}
	c := mustBegin(t, s, req, idem.Acquired)
	if c.Owner.Fence <= fence || c.Takeover || c.Started {
		t.Fatalf("Begin after a release = fence %d takeover %v started %v; want a fresh claim above fence %d", c.Owner.Fence, c.Takeover, c.Started, fence)
	}
	if err := resolve(req.Key.Digest(), fence, true, nil); !errors.Is(err, idem.ErrNotHeld) {
		t.Fatalf("release after the key was acquired again = %v, want ErrNotHeld", err)
	}

	// Do replays a resolution: the operator stores the JSON of its value.
	key := newKey(t)
	func() {
		defer func() { _ = recover() }() // fn panicked: it may have acted
		_, _ = idem.Do(ctx, s, key, &idem.Options{AtMostOnce: true}, func(context.Context) (int, error) { panic("lost") })
	}()
	run := func(context.Context) (int, error) { t.Fatal("fn ran for a held key"); return 0, nil }
	if _, err := idem.Do(ctx, s, key, &idem.Options{AtMostOnce: true}, run); !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("Do of a held key = %v, want ErrOutcomeUnknown", err)
	}
	rec := mustGet(t, s, key)
	if rec.State != idem.StateHeld {
		t.Fatalf("Do's held key is %v, want held", rec.State)
	}
	if err := resolve(key.Digest(), rec.Fence, false, []byte("42")); err != nil {
		t.Fatal(err)
	}
	if v, err := idem.Do(ctx, s, key, &idem.Options{AtMostOnce: true}, run); err != nil || v != 42 {
		t.Fatalf("Do after Resolve = %v, %v; want the resolved 42", v, err)
	}
}

// testResolveExpired: a held record whose retention ran out is free; it
// is not resolved.
func testResolveExpired(t *testing.T, h Harness) {
	s, _ := resolver(t, h)
	if s == nil {
		return
	}
	req := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("held"), Lease: shortLease, Retention: shortRetention}
	c := mustBegin(t, s, req, idem.Acquired)
	if err := s.Hold(ctxT(t), c.Owner, idem.OutcomeUnknownResult()); err != nil {
		t.Fatal(err)
	}
	eventually(t, s, req, idem.Acquired)
	err := idem.Resolve(ctxT(t), s, idem.Resolution{Digest: req.Key.Digest(), Fence: c.Owner.Fence, Release: true})
	if !errors.Is(err, idem.ErrNotHeld) && !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("Resolve of an expired held record = %v, want ErrNotHeld", err)
	}
}

// testResolveRaces races, on each of 24 held keys, a release and a
// resolution with a result against each other and against Begins with a
// short lease, so that claims acquired after the release are taken over
// while the losing resolution is still trying: exactly one resolution
// wins, a result is never replayed unless it won, the work is acquired only
// after a release (each claim fenced above the last), and a resolution
// never touches a record that was acquired again.
func testResolveRaces(t *testing.T, h Harness) {
	s, _ := resolver(t, h)
	if s == nil {
		return
	}
	const keys, beginners, rounds = 24, 4, 6
	type outcome struct {
		released, resolved bool
		replays            [][]byte
		fences             []uint64
	}
	results := make([]outcome, keys)
	var wg sync.WaitGroup
	for k := range keys {
		marker := idem.OutcomeUnknownResult() // Do's
		if k%2 == 1 {
			marker = httpHeld
		}
		req, fence := hold(t, s, marker)
		req.Lease = time.Millisecond
		req.Retention = time.Hour
		result := fmt.Appendf(nil, `{"key":%d}`, k)
		var mu sync.Mutex
		o := &results[k]
		start := make(chan struct{})
		resolveOne := func(release bool) {
			defer wg.Done()
			<-start
			var res []byte
			if !release {
				res = result
			}
			err := idem.Resolve(ctxT(t), s, idem.Resolution{Digest: req.Key.Digest(), Fence: fence, Release: release, Result: res})
			switch {
			case err == nil:
				mu.Lock()
				if release {
					o.released = true
				} else {
					o.resolved = true
				}
				mu.Unlock()
			case !errors.Is(err, idem.ErrNotHeld):
				t.Errorf("key %d: Resolve: %v", k, err)
			}
		}
		wg.Add(2 + beginners)
		go resolveOne(true)
		go resolveOne(false)
		for range beginners {
			go func() {
				defer wg.Done()
				<-start
				for range rounds {
					c, err := s.Begin(ctxT(t), req)
					if err != nil {
						t.Errorf("key %d: Begin: %v", k, err)
						return
					}
					mu.Lock()
					switch c.Outcome {
					case idem.Replay:
						o.replays = append(o.replays, c.Result)
					case idem.Acquired:
						o.fences = append(o.fences, c.Owner.Fence)
					}
					mu.Unlock()
				}
			}()
		}
		close(start)
		defer func(fence uint64, marker, result []byte, o *outcome) {
			if t.Failed() {
				return
			}
			if o.released == o.resolved {
				t.Errorf("key %d: released %v, resolved %v; want exactly one resolution to win", k, o.released, o.resolved)
			}
			for _, r := range o.replays {
				if !bytes.Equal(r, marker) && !(o.resolved && bytes.Equal(r, result)) {
					t.Errorf("key %d: replayed %q (released %v, resolved %v)", k, r, o.released, o.resolved)
				}
			}
			if o.resolved && len(o.fences) > 0 {
				t.Errorf("key %d: acquired %d times after it was resolved with a result", k, len(o.fences))
			}
			prev := fence
			seen := map[uint64]bool{}
			for _, f := range o.fences {
				if f <= fence || seen[f] {
					t.Errorf("key %d: claim with fence %d (held at %d, claims %v)", k, f, fence, o.fences)
				}
				seen[f] = true
				prev = max(prev, f)
			}
			// A resolution at the held fence never touches a later claim.
			if len(o.fences) > 0 {
				if err := idem.Resolve(ctxT(t), s, idem.Resolution{Digest: req.Key.Digest(), Fence: fence, Result: result}); !errors.Is(err, idem.ErrNotHeld) {
					t.Errorf("key %d: Resolve after the key was acquired again = %v, want ErrNotHeld", k, err)
				}
				if rec := mustGet(t, s, req.Key); rec.Fence != prev {
					t.Errorf("key %d: record fence %d, want the last claim's %d", k, rec.Fence, prev)
				}
			}
		}(fence, marker, result, o)
	}
	wg.Wait()
}

// testListHeld: List by StateHeld returns exactly the held records, and
// StateCompleted no longer does.
func testListHeld(t *testing.T, h Harness) {
	s := h.New(t)
	l, ok := s.(Lister)
	if !ok {
		t.Logf("%T cannot List: no list case", s)
		return
	}
	ctx := ctxT(t)
	heldDo, _ := hold(t, s, nil)
	heldHTTP, _ := hold(t, s, httpHeld)
	done := idem.BeginRequest{Key: newKey(t), Fingerprint: fp("done")}
	c := mustBegin(t, s, done, idem.Acquired)
	if err := s.Complete(ctx, c.Owner, []byte("ih\x01\x00 not held")); err != nil {
		t.Fatal(err)
	}
	mine := map[idem.Digest]string{heldDo.Key.Digest(): "held by Do", heldHTTP.Key.Digest(): "held by HTTP", done.Key.Digest(): "completed"}
	for _, st := range []idem.State{idem.StateHeld, idem.StateCompleted, 0} {
		recs, err := l.List(ctx, st, false, 100000)
		if err != nil {
			t.Fatalf("List(%v): %v", st, err)
		}
		got := map[string]idem.State{}
		for _, r := range recs {
			if name, ok := mine[r.Digest]; ok {
				got[name] = r.State
			}
		}
		want := map[string]idem.State{"held by Do": idem.StateHeld, "held by HTTP": idem.StateHeld, "completed": idem.StateCompleted}
		for name, ws := range want {
			if st != 0 && ws != st {
				delete(want, name)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("List(%v) of ours = %v, want %v", st, got, want)
		}
	}
}

// testReplyLostResolve (RunFaults): a resolution whose reply is lost after
// it ran is sent again and succeeds, and the key ends resolved exactly as
// asked: a stored result is replayed, a released key is acquired once.
func testReplyLostResolve(t *testing.T, f *faultRig) {
	if _, ok := f.s.(idem.Resolver); !ok {
		t.Logf("%T does not implement idem.Resolver: no resolve case", f.s)
		return
	}
	for _, release := range []bool{false, true} {
		name := "Result"
		if release {
			name = "Release"
		}
		t.Run(name, func(t *testing.T) {
			req := f.req(t)
			c := f.acquireAfter(t, f.s, req)
			recoverOp(t, "Hold", func(ctx context.Context) error {
				return f.s.Hold(ctx, c.Owner, idem.OutcomeUnknownResult())
			})
			r := idem.Resolution{Digest: req.Key.Digest(), Fence: c.Owner.Fence, Release: release}
			if !release {
				r.Result = []byte(`{"resolved":true}`)
			}
			// Warm the resolve statement or script on a throwaway held key.
			f.warm(t)
			for range 2 {
				wc := f.acquireAfter(t, f.s, f.req(t))
				recoverOp(t, "Hold", func(ctx context.Context) error {
					return f.s.Hold(ctx, wc.Owner, idem.OutcomeUnknownResult())
				})
				w := r
				w.Digest, w.Fence = wc.Owner.Key.Digest(), wc.Owner.Fence
				if err := idem.Resolve(ctxT(t), f.s, w); err != nil {
					t.Fatalf("warm-up Resolve: %v", err)
				}
			}
			f.p.DropNextReply()
			f.attempt(t, "Resolve", func(ctx context.Context) error { return idem.Resolve(ctx, f.s, r) })
			// The operator sends it again: it succeeds whether or not the
			// first one ran.
			recoverOp(t, "Resolve", func(ctx context.Context) error { return idem.Resolve(ctx, f.s, r) })
			if release {
				nc, err := f.direct.Begin(ctxT(t), req)
				if err != nil || nc.Outcome != idem.Acquired || nc.Started {
					t.Fatalf("Begin after a resent release = %v started %v, %v; want a fresh Acquired", nc.Outcome, nc.Started, err)
				}
				f.acquired(t, nc.Owner)
				f.completeAndReplay(t, nc.Owner, r.Result)
			} else {
				f.mustReplay(t, req, r.Result)
			}
			f.checkOwners(t)
		})
	}
}
