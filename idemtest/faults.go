package idemtest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest/faultproxy"
)

// FaultHarness tells RunFaults how to reach a store's server through a
// fault proxy.
type FaultHarness struct {
	// Target is the real server's address, host:port. Required.
	Target string

	// New prepares a fresh namespace on the server (a table, a schema, a
	// key prefix) and returns open, which returns a store on that namespace
	// that reaches the server at addr: the fault proxy's address, or Target
	// for a client that the fault does not touch. Stores from one New see
	// the same records; each open call may open its own connections.
	// Required. Cases run in parallel, each with its own New.
	New func(t *testing.T) (open func(addr string) idem.Store)

	// Restart, if set, restarts the server at Target and returns once it
	// accepts connections again on the same address. The server must keep
	// every committed write across the restart (a durable configuration);
	// a server that comes back with older data is a snapshot restore, which
	// this suite does not model. Nil leaves the restart case out: set it
	// only for a private server, never the shared one. The restart runs
	// after the network cases, never during one.
	Restart func(t *testing.T)

	// Deadline is the context deadline of each operation attempted under a
	// fault. An operation must return by then (with an error for which
	// idem.IsUnavailable is true, or the context's error once the context
	// has ended), never hang. Zero means 2s.
	Deadline time.Duration
}

// hangSlack is how long past its context's deadline an operation may take
// to return before the suite calls it a hang. It is generous: a loaded
// machine must not fail the suite, and a real hang lasts forever.
const hangSlack = 10 * time.Second

// RunFaults runs the store through a TCP fault proxy in front of its real
// server (see package faultproxy): a reply lost after the command ran,
// every reply dropped for a while (commands still delivered), a
// black-holed connection, a partitioned holder, a reset in mid-reply, and,
// when the harness can restart its server, a server restart. Each case
// asserts the invariants of the record lifecycle rather than any error
// text:
//
//   - never two live owners: a store never grants a claim while another
//     owner's lease is live, and every owner but the newest of a key is
//     fenced out (its Complete gets idem.ErrLeaseLost);
//   - no lost completed result: a Complete that succeeded, or that ran on
//     the server although its reply was lost, is replayed by every later
//     Begin, byte for byte;
//   - unavailable errors, not hangs: an operation under a fault returns by
//     its deadline with an error for which idem.IsUnavailable is true, or
//     with the context's error only once its context has ended;
//   - no key stuck longer than one lease: a claim whose owner never learnt
//     it holds it (its reply was lost) frees itself after its lease, and a
//     lost reply never turns the caller's own claim into InFlight.
//
// Stores without a network between the client and the data (an in-process
// map, an SQLite file) have nothing for the proxy to cut; RunStore covers
// them.
func RunFaults(t *testing.T, h FaultHarness) {
	t.Helper()
	if h.Target == "" || h.New == nil {
		t.Fatal("idemtest: FaultHarness.Target and New are required")
	}
	if h.Deadline <= 0 {
		h.Deadline = 2 * time.Second
	}
	cases := []struct {
		name string
		run  func(t *testing.T, f *faultRig)
	}{
		{"ReplyLostBegin", testReplyLostBegin},
		{"ReplyLostOwnerWrites", testReplyLostOwnerWrites},
		{"BlackHole", testBlackHole},
		{"RepliesDropped", testRepliesDropped},
		{"PartitionedHolderStopsBeforeTakeover", testPartitionedHolder},
		{"ResetMidReply", testResetMidReply},
		{"ReplyLostResolve", testReplyLostResolve},
		{"DoFinishBlackHole", testDoFinishBlackHole},
		{"DoFinishRefused", testDoFinishRefused},
	}
	rig := func(t *testing.T) *faultRig {
		open := h.New(t)
		p := faultproxy.New(t, h.Target)
		return &faultRig{h: h, p: p, s: open(p.Addr()), direct: open(h.Target)}
	}
	// The network cases run in parallel; the restart comes after them, so
	// that it never disturbs another case.
	t.Run("Network", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, rig(t))
			})
		}
	})
	t.Run("ServerRestart", func(t *testing.T) {
		if h.Restart == nil {
			t.Log("the harness cannot restart its server (FaultHarness.Restart is nil)")
			return
		}
		testServerRestart(t, rig(t))
	})
}

// faultRig is one case's setup: a store through the proxy and one that
// reaches the server directly, on the same records.
type faultRig struct {
	h      FaultHarness
	p      *faultproxy.Proxy
	s      idem.Store // through the proxy
	direct idem.Store // straight to the server

	mu     sync.Mutex
	owners map[idem.Key][]idem.Owner // every owner acquired, in order
}

// lease is the lease of the claims the cases make: longer than an
// operation's deadline, so that a claim made by an operation whose reply
// was lost is still live when the caller retries.
func (f *faultRig) lease() time.Duration { return 2*f.h.Deadline + time.Second }

func (f *faultRig) req(t *testing.T) idem.BeginRequest {
	return idem.BeginRequest{Key: newKey(t), Fingerprint: fp("fault"), Lease: f.lease(), Retention: time.Hour}
}

// acquired records an owner; fences of one key must grow in the order the
// owners were granted.
func (f *faultRig) acquired(t *testing.T, o idem.Owner) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owners == nil {
		f.owners = make(map[idem.Key][]idem.Owner)
	}
	prev := f.owners[o.Key]
	if n := len(prev); n > 0 && o.Fence <= prev[n-1].Fence {
		t.Errorf("key %v: owner granted with fence %d after fence %d", o.Key, o.Fence, prev[n-1].Fence)
	}
	f.owners[o.Key] = append(prev, o)
}

// checkOwners asserts that, for every key, every owner but the newest is
// fenced out.
func (f *faultRig) checkOwners(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for key, owners := range f.owners {
		for _, o := range owners[:len(owners)-1] {
			if err := f.direct.Complete(ctxT(t), o, []byte("stale")); !errors.Is(err, idem.ErrLeaseLost) {
				t.Errorf("key %v: superseded owner (fence %d) Complete = %v, want ErrLeaseLost: two live owners", key, o.Fence, err)
			}
		}
	}
}

// attempt runs op under a fault with the harness's deadline and checks
// that it returned in time with an acceptable error (or none).
func (f *faultRig) attempt(t *testing.T, name string, op func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), f.h.Deadline)
	defer cancel()
	start := time.Now()
	err := op(ctx)
	if late := time.Since(start) - f.h.Deadline; late > hangSlack {
		t.Errorf("%s under a fault returned %v after its context's deadline: a hang", name, late.Round(time.Millisecond))
	}
	checkFaultErr(t, name, ctx, err)
	return err
}

// checkFaultErr: a store failure is idem.ErrUnavailable; the context's own
// error only once the caller's context has ended.
func checkFaultErr(t *testing.T, name string, ctx context.Context, err error) {
	t.Helper()
	switch {
	case err == nil, idem.IsUnavailable(err):
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if ctx.Err() == nil {
			t.Errorf("%s returned a context error while the caller's context is alive: %v", name, err)
		}
	default:
		t.Errorf("%s under a fault = %v; want an error for which idem.IsUnavailable is true", name, err)
	}
}

// warm makes sure the store has open connections that have just been
// used, so that a one-shot fault hits the next operation's own reply and
// not a handshake. It makes warmGets Gets of a missing key: a client that
// spreads commands over several connections and dials each on first use
// (rueidis pipelines over 2 to 4, picked at random) has then opened them
// all; a pooled client reuses one.
func (f *faultRig) warm(t *testing.T) {
	t.Helper()
	k := newKey(t)
	for range warmGets {
		if _, err := f.s.Get(ctxT(t), k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("warm-up Get through the proxy = %v, want ErrNotFound", err)
		}
	}
}

const warmGets = 64

// warmOwner runs op, through the proxy, for an owner of a throwaway key
// just before the fault: a client that prepares statements or scripts on
// first use (and caches them per connection) has then done so, and the
// fault hits the reply of the statement that does the work.
//
// It runs twice: some clients (pgx) cache a statement only on its second
// use.
func (f *faultRig) warmOwner(t *testing.T, op func(ctx context.Context, o idem.Owner) error) {
	t.Helper()
	f.warm(t)
	for range 2 {
		c, err := f.s.Begin(ctxT(t), f.req(t))
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("warm-up Begin through the proxy = %v, %v", c.Outcome, err)
		}
		if err := op(ctxT(t), c.Owner); err != nil {
			t.Fatalf("warm-up through the proxy: %v", err)
		}
	}
}

// recover retries op, once the fault has passed, until it returns nil.
// Unavailable errors are allowed for a while (a pool discarding broken
// connections); anything else fails the test.
func recoverOp(t *testing.T, name string, op func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		err := op(ctxT(t))
		if err == nil {
			return
		}
		if !idem.IsUnavailable(err) {
			t.Fatalf("%s after the fault passed: %v", name, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still failing %v after the fault passed: %v", name, waitLimit, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// acquireAfter claims req once the fault has passed. A claim left by an
// operation whose reply was lost may hold the key, but for one lease at
// most: every InFlight answer must say so.
func (f *faultRig) acquireAfter(t *testing.T, s idem.Store, req idem.BeginRequest) idem.Claim {
	t.Helper()
	var c idem.Claim
	recoverOp(t, "Begin", func(ctx context.Context) error {
		var err error
		c, err = s.Begin(ctx, req)
		if err != nil {
			return err
		}
		switch c.Outcome {
		case idem.Acquired:
			return nil
		case idem.InFlight:
			if c.RetryAfter > req.Lease {
				t.Fatalf("key held for %v, longer than one lease (%v)", c.RetryAfter, req.Lease)
			}
			time.Sleep(min(c.RetryAfter, 200*time.Millisecond))
			return idem.StoreError(context.Background(), "begin", errors.New("still in flight")) // keep polling
		}
		t.Fatalf("Begin after the fault = %v, want Acquired", c.Outcome)
		return nil
	})
	f.acquired(t, c.Owner)
	return c
}

func (f *faultRig) completeAndReplay(t *testing.T, o idem.Owner, result []byte) {
	t.Helper()
	recoverOp(t, "Complete", func(ctx context.Context) error { return f.s.Complete(ctx, o, result) })
	f.mustReplay(t, idem.BeginRequest{Key: o.Key, Fingerprint: fp("fault")}, result)
}

// mustReplay checks that both stores replay result for req.
func (f *faultRig) mustReplay(t *testing.T, req idem.BeginRequest, result []byte) {
	t.Helper()
	for name, s := range map[string]idem.Store{"through the proxy": f.s, "direct": f.direct} {
		var c idem.Claim
		recoverOp(t, "Begin", func(ctx context.Context) error {
			var err error
			c, err = s.Begin(ctx, req)
			return err
		})
		if c.Outcome != idem.Replay || !bytes.Equal(c.Result, result) {
			t.Errorf("Begin %s = %v with %d bytes, want a replay of the %d-byte result", name, c.Outcome, len(c.Result), len(result))
		}
	}
}

func testReplyLostBegin(t *testing.T, f *faultRig) {
	req := f.req(t)
	f.warmOwner(t, func(context.Context, idem.Owner) error { return nil })
	f.p.DropNextReply()
	var c idem.Claim
	err := f.attempt(t, "Begin", func(ctx context.Context) (err error) {
		c, err = f.s.Begin(ctx, req)
		return err
	})
	err0 := err
	if err == nil {
		// A client that resent the command on another connection: its own
		// claim must come back as its own, never as someone else's.
		switch c.Outcome {
		case idem.Acquired:
			f.acquired(t, c.Owner)
			f.completeAndReplay(t, c.Owner, []byte("first"))
			f.checkOwners(t)
			return
		case idem.InFlight:
			t.Fatalf("Begin whose reply was lost answered InFlight: the caller's own claim blocks its key for a lease")
		default:
			t.Fatalf("Begin whose reply was lost = %v", c.Outcome)
		}
	}
	if rec, err := f.direct.Get(ctxT(t), req.Key); err == nil {
		t.Logf("the lost Begin ran on the server: record %v, lease until %v", rec.State, rec.LeaseUntil)
	} else {
		t.Logf("the lost Begin did not run on the server: %v (Begin: %v)", err, err0)
	}
	// The caller retries with the same key: it waits at most one lease for
	// the claim nobody knows it holds, then takes it.
	c = f.acquireAfter(t, f.s, req)
	f.completeAndReplay(t, c.Owner, []byte("after lost reply"))
	f.checkOwners(t)
}

func testReplyLostOwnerWrites(t *testing.T, f *faultRig) {
	result := []byte(`{"charge":"ch_42"}`)
	owner := func() (idem.BeginRequest, idem.Owner) {
		req := f.req(t)
		c := f.acquireAfter(t, f.s, req)
		return req, c.Owner
	}

	t.Run("Complete", func(t *testing.T) {
		req, o := owner()
		f.warmOwner(t, func(ctx context.Context, o idem.Owner) error { return f.s.Complete(ctx, o, result) })
		f.p.DropNextReply()
		err := f.attempt(t, "Complete", func(ctx context.Context) error { return f.s.Complete(ctx, o, result) })
		// Whatever the store did, a retry by another caller never runs the
		// work again: the record is completed or still held.
		c, berr := f.direct.Begin(ctxT(t), req)
		if berr != nil {
			t.Fatal(berr)
		}
		switch {
		case c.Outcome == idem.Replay && !bytes.Equal(c.Result, result):
			t.Fatalf("replay after a lost Complete reply = %q, want %q", c.Result, result)
		case err == nil && c.Outcome != idem.Replay:
			t.Fatalf("Complete succeeded but Begin = %v, want Replay: a lost result", c.Outcome)
		case c.Outcome != idem.Replay && c.Outcome != idem.InFlight:
			t.Fatalf("Begin after a lost Complete reply = %v, want Replay or InFlight", c.Outcome)
		}
		// The owner resends its Complete: it succeeds, and keeps the result.
		f.completeAndReplay(t, o, result)
	})

	t.Run("Hold", func(t *testing.T) {
		req, o := owner()
		held := idem.OutcomeUnknownResult()
		f.warmOwner(t, func(ctx context.Context, o idem.Owner) error { return f.s.Hold(ctx, o, held) })
		f.p.DropNextReply()
		f.attempt(t, "Hold", func(ctx context.Context) error { return f.s.Hold(ctx, o, held) })
		// The owner resends its Hold: it succeeds, and the key is held.
		recoverOp(t, "Hold", func(ctx context.Context) error { return f.s.Hold(ctx, o, held) })
		if rec, err := f.direct.Get(ctxT(t), o.Key); err != nil || rec.State != idem.StateHeld || !bytes.Equal(rec.Result, held) {
			t.Fatalf("record after a resent Hold = %+v, %v; want held with the outcome-unknown result", rec, err)
		}
		if c, err := f.direct.Begin(ctxT(t), req); err != nil || c.Outcome != idem.Replay || !bytes.Equal(c.Result, held) {
			t.Fatalf("Begin after a resent Hold = %v %q, %v; want a replay of the held answer", c.Outcome, c.Result, err)
		}
	})

	t.Run("Extend", func(t *testing.T) {
		_, o := owner()
		f.warmOwner(t, func(ctx context.Context, o idem.Owner) error { return f.s.Extend(ctx, o, time.Minute) })
		f.p.DropNextReply()
		f.attempt(t, "Extend", func(ctx context.Context) error { return f.s.Extend(ctx, o, time.Minute) })
		recoverOp(t, "Extend", func(ctx context.Context) error { return f.s.Extend(ctx, o, time.Minute) })
		f.completeAndReplay(t, o, result)
	})

	t.Run("MarkStarted", func(t *testing.T) {
		_, o := owner()
		f.warmOwner(t, f.s.MarkStarted)
		f.p.DropNextReply()
		f.attempt(t, "MarkStarted", func(ctx context.Context) error { return f.s.MarkStarted(ctx, o) })
		recoverOp(t, "MarkStarted", func(ctx context.Context) error { return f.s.MarkStarted(ctx, o) })
		if rec, err := f.direct.Get(ctxT(t), o.Key); err != nil || !rec.Started {
			t.Fatalf("record after a resent MarkStarted = %+v, %v; want Started", rec, err)
		}
		f.completeAndReplay(t, o, result)
	})

	t.Run("Release", func(t *testing.T) {
		req, o := owner()
		f.warmOwner(t, f.s.Release)
		f.p.DropNextReply()
		err := f.attempt(t, "Release", func(ctx context.Context) error { return f.s.Release(ctx, o) })
		// The owner resends its Release; if the first one ran, the resend
		// finds nothing to release, which is fine.
		recoverOp(t, "Release", func(ctx context.Context) error {
			err := f.s.Release(ctx, o)
			if errors.Is(err, idem.ErrLeaseLost) {
				return nil
			}
			return err
		})
		_ = err
		// Released means free at once, not after a lease.
		c, err := f.direct.Begin(ctxT(t), req)
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("Begin after a resent Release = %v, %v; want Acquired", c.Outcome, err)
		}
		f.acquired(t, c.Owner)
		f.completeAndReplay(t, c.Owner, result)
	})
	f.checkOwners(t)
}

func testBlackHole(t *testing.T, f *faultRig) {
	held, done := f.req(t), f.req(t)
	ho := f.acquireAfter(t, f.s, held).Owner
	do := f.acquireAfter(t, f.s, done).Owner
	result := []byte("done before the partition")
	f.completeAndReplay(t, do, result)

	f.p.Set(faultproxy.BlackHole)
	var mu sync.Mutex
	completed := false
	var wg sync.WaitGroup
	ops := map[string]func(ctx context.Context) error{
		"Begin(new key)": func(ctx context.Context) error {
			c, err := f.s.Begin(ctx, f.req(t))
			if err == nil && c.Outcome == idem.Acquired {
				f.acquired(t, c.Owner)
			}
			return err
		},
		"Begin(completed key)": func(ctx context.Context) error {
			c, err := f.s.Begin(ctx, done)
			if err == nil && (c.Outcome != idem.Replay || !bytes.Equal(c.Result, result)) {
				t.Errorf("Begin of a completed key during a black hole = %v, want Replay", c.Outcome)
			}
			return err
		},
		"Complete": func(ctx context.Context) error {
			err := f.s.Complete(ctx, ho, []byte("held"))
			if err == nil {
				mu.Lock()
				completed = true
				mu.Unlock()
			}
			return err
		},
		"Extend":      func(ctx context.Context) error { return f.s.Extend(ctx, ho, f.lease()) },
		"MarkStarted": func(ctx context.Context) error { return f.s.MarkStarted(ctx, ho) },
		"Get":         func(ctx context.Context) error { _, err := f.s.Get(ctx, held.Key); return err },
		"Purge":       func(ctx context.Context) error { _, err := f.s.Purge(ctx, time.Hour, 10); return err },
	}
	for name, op := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.attempt(t, name, op)
		}()
	}
	// Meanwhile a client that is not cut off sees the held claim as held:
	// a partition frees nothing before the lease runs out.
	c, err := f.direct.Begin(ctxT(t), held)
	if err != nil {
		t.Fatal(err)
	}
	if c.Outcome == idem.Acquired {
		t.Errorf("a live claim was granted to another caller during the partition")
		f.acquired(t, c.Owner)
	}
	wg.Wait()
	f.p.Set(faultproxy.Pass)

	// The store recovers by itself once the network does.
	c = f.acquireAfter(t, f.s, f.req(t))
	f.completeAndReplay(t, c.Owner, []byte("after the partition"))
	mu.Lock()
	wasCompleted := completed
	mu.Unlock()
	if wasCompleted {
		f.mustReplay(t, held, []byte("held"))
	} else {
		f.completeAndReplay(t, ho, []byte("held"))
	}
	f.mustReplay(t, done, result)
	f.checkOwners(t)
}

// testRepliesDropped delivers every command but no reply, on every
// connection, open or new, for a while: the server does the work, the
// client learns nothing. Afterwards the owner resends, and nothing is lost
// or doubled.
func testRepliesDropped(t *testing.T, f *faultRig) {
	held := f.req(t)
	ho := f.acquireAfter(t, f.s, held).Owner
	fresh := f.req(t)
	f.p.Set(faultproxy.DropReplies)
	completed := f.attempt(t, "Complete", func(ctx context.Context) error { return f.s.Complete(ctx, ho, []byte("held")) }) == nil
	var c idem.Claim
	if err := f.attempt(t, "Begin", func(ctx context.Context) (err error) {
		c, err = f.s.Begin(ctx, fresh)
		return err
	}); err == nil {
		if c.Outcome != idem.Acquired {
			t.Fatalf("Begin of a new key while replies are dropped = %v", c.Outcome)
		}
		f.acquired(t, c.Owner)
	}
	f.p.Set(faultproxy.Pass)
	if completed {
		f.mustReplay(t, held, []byte("held"))
	} else {
		f.completeAndReplay(t, ho, []byte("held"))
	}
	if c.Outcome != idem.Acquired {
		c = f.acquireAfter(t, f.s, fresh)
	}
	f.completeAndReplay(t, c.Owner, []byte("fresh"))
	f.checkOwners(t)
}

// testPartitionedHolder cuts a working holder off from the store while a
// client that is not cut off keeps retrying. The holder's heartbeat must
// give its work up (cancel its context) before the store can grant the
// claim to anyone else: at no moment do two callers both believe they own
// the key.
func testPartitionedHolder(t *testing.T, f *faultRig) {
	req := f.req(t)
	sent := time.Now()
	c := f.acquireAfter(t, f.s, req)
	// The holder works as an adapter's attempt does: its heartbeat runs
	// from Attempt.Start, counting the lease from when Begin was sent.
	var a idem.Attempt
	work, err := a.Start(context.Background(), &idem.Claimer{Store: f.s}, idem.Ticket{Claim: c, Sent: sent, Lease: req.Lease})
	if err != nil {
		t.Fatal(err)
	}
	defer a.End()
	f.p.Set(faultproxy.BlackHole)
	taken := f.acquireAfter(t, f.direct, req)
	if work.Err() == nil {
		t.Fatalf("the claim was taken over while its partitioned holder's context was still alive: two live owners")
	}
	if !a.Lost() {
		t.Errorf("partitioned holder's context ended with %v, want ErrLeaseLost as its cause", context.Cause(work))
	}
	if !taken.Takeover {
		t.Errorf("claim after the holder's lease ran out not reported as a takeover")
	}
	f.p.Set(faultproxy.Pass)
	// The old holder, back on the network, is fenced out.
	recoverOp(t, "Complete(stale)", func(ctx context.Context) error {
		err := f.s.Complete(ctx, c.Owner, []byte("stale"))
		if errors.Is(err, idem.ErrLeaseLost) {
			return nil
		}
		if err == nil {
			t.Fatalf("the partitioned holder completed a claim that was taken over")
		}
		return err
	})
	f.completeAndReplay(t, taken.Owner, []byte("new holder"))
	f.checkOwners(t)
}

func testResetMidReply(t *testing.T, f *faultRig) {
	big := make([]byte, 256<<10)
	_, _ = rand.Read(big)

	t.Run("Replay", func(t *testing.T) {
		req := f.req(t)
		o := f.acquireAfter(t, f.s, req).Owner
		f.completeAndReplay(t, o, big)
		f.warm(t)
		f.p.CutNextReply(1000)
		var c idem.Claim
		err := f.attempt(t, "Begin(replay)", func(ctx context.Context) (err error) {
			c, err = f.s.Begin(ctx, req)
			return err
		})
		if err == nil && (c.Outcome != idem.Replay || !bytes.Equal(c.Result, big)) {
			t.Fatalf("Begin whose reply was cut = %v with %d bytes: a partial result passed as a replay", c.Outcome, len(c.Result))
		}
		f.mustReplay(t, req, big)
	})

	t.Run("Complete", func(t *testing.T) {
		req := f.req(t)
		o := f.acquireAfter(t, f.s, req).Owner
		f.warmOwner(t, func(ctx context.Context, o idem.Owner) error { return f.s.Complete(ctx, o, big) })
		f.p.CutNextReply(3)
		f.attempt(t, "Complete", func(ctx context.Context) error { return f.s.Complete(ctx, o, big) })
		f.completeAndReplay(t, o, big)
	})

	t.Run("Begin", func(t *testing.T) {
		req := f.req(t)
		f.warmOwner(t, func(context.Context, idem.Owner) error { return nil })
		f.p.CutNextReply(5)
		var c idem.Claim
		err := f.attempt(t, "Begin", func(ctx context.Context) (err error) {
			c, err = f.s.Begin(ctx, req)
			return err
		})
		if err == nil {
			if c.Outcome != idem.Acquired {
				t.Fatalf("Begin whose reply was cut = %v, want Acquired or an error", c.Outcome)
			}
			f.acquired(t, c.Owner)
		} else {
			c = f.acquireAfter(t, f.s, req)
		}
		f.completeAndReplay(t, c.Owner, []byte("after reset"))
	})
	f.checkOwners(t)
}

func testServerRestart(t *testing.T, f *faultRig) {
	held, done, marked := f.req(t), f.req(t), f.req(t)
	held.Lease = time.Minute
	ho := f.acquireAfter(t, f.s, held).Owner
	do := f.acquireAfter(t, f.s, done).Owner
	mo := f.acquireAfter(t, f.s, marked).Owner
	result := []byte(fmt.Sprintf("committed before the restart %x", do.Token[:4]))
	f.completeAndReplay(t, do, result)
	recoverOp(t, "MarkStarted", func(ctx context.Context) error { return f.s.MarkStarted(ctx, mo) })

	f.h.Restart(t)

	// Pooled connections died with the server: the first operations may
	// fail, as unavailable, and the store then recovers by itself.
	f.mustReplay(t, done, result)
	c, err := f.s.Begin(ctxT(t), held)
	if err != nil {
		t.Fatal(err)
	}
	if c.Outcome != idem.InFlight || c.RetryAfter > held.Lease {
		t.Errorf("claim held across the restart: Begin = %v (retry after %v), want InFlight within its lease", c.Outcome, c.RetryAfter)
	}
	if rec, err := f.s.Get(ctxT(t), marked.Key); err != nil || !rec.Started {
		t.Errorf("MarkStarted lost in the restart: %+v, %v", rec, err)
	}
	f.completeAndReplay(t, ho, []byte("held across the restart"))
	// Fences keep growing across the restart.
	o := f.acquireAfter(t, f.s, f.req(t)).Owner
	for _, prev := range []idem.Owner{ho, do, mo} {
		if o.Fence <= prev.Fence {
			t.Errorf("fence %d after the restart, want > %d", o.Fence, prev.Fence)
		}
	}
	f.checkOwners(t)
}

// testDoFinishBlackHole black-holes the store while fn runs: fn has acted,
// and Do cannot store its result. Do must return by its caller's deadline
// plus the finishing grace (idem.DefaultFinishGrace), with an error, and
// the key must not be free for a rerun: fn ran.
func testDoFinishBlackHole(t *testing.T, f *faultRig) {
	f.warm(t)
	key := newKey(t)
	opts := &idem.Options{Fingerprint: fp("do"), Lease: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), f.h.Deadline)
	defer cancel()
	start := time.Now()
	v, err := idem.Do(ctx, f.s, key, opts, func(context.Context) (int, error) {
		f.p.Set(faultproxy.BlackHole)
		return 42, nil
	})
	took := time.Since(start)
	if late := took - f.h.Deadline - idem.DefaultFinishGrace; late > hangSlack {
		t.Errorf("Do with its store black-holed inside fn returned %v past its deadline and the finishing grace: a hang", late.Round(time.Millisecond))
	}
	t.Logf("Do returned after %v: %v", took.Round(time.Millisecond), err)
	if err == nil {
		t.Fatalf("Do with its store black-holed before Complete = %d, nil: a result no retry can replay", v)
	}
	checkFaultErr(t, "Do", ctx, err)
	f.p.Set(faultproxy.Pass)
	c, err := f.direct.Begin(ctxT(t), idem.BeginRequest{Key: key, Fingerprint: fp("do"), Lease: time.Minute, Retention: idem.DefaultRetention})
	if err != nil {
		t.Fatal(err)
	}
	if c.Outcome == idem.Acquired {
		t.Errorf("after fn ran and its Complete was black-holed, a rerun acquired the key")
	}
}

// testDoFinishRefused takes the server away while fn runs (open
// connections reset, new ones refused) and brings it back a moment later:
// a Complete that never reached the server (refused) is tried again within
// the finishing grace, and the result is stored. fn waits a little after
// the resets, so that a client that watches its connections has seen them
// go: a command written into a connection as it is reset may or may not
// have arrived, and is rightly not retried.
func testDoFinishRefused(t *testing.T, f *faultRig) {
	f.warm(t)
	key := newKey(t)
	opts := &idem.Options{Fingerprint: fp("do"), Lease: time.Minute}
	ctx, cancel := context.WithTimeout(context.Background(), f.h.Deadline)
	defer cancel()
	back := make(chan struct{})
	v, err := idem.Do(ctx, f.s, key, opts, func(context.Context) (int, error) {
		f.p.Set(faultproxy.Refuse)
		time.AfterFunc(500*time.Millisecond, func() { f.p.Set(faultproxy.Pass); close(back) })
		time.Sleep(100 * time.Millisecond)
		return 42, nil
	})
	<-back
	req := idem.BeginRequest{Key: key, Fingerprint: fp("do"), Lease: time.Minute, Retention: idem.DefaultRetention}
	if errors.Is(err, syscall.ECONNRESET) && idem.IsUnavailable(err) {
		// The client wrote Complete into a connection that the reset had
		// not yet closed on its side: it may have arrived. Not retried,
		// rightly; fn ran, so the key must not be free.
		t.Logf("Complete was written into a reset connection, not retried: %v", err)
		c, err := f.direct.Begin(ctxT(t), req)
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome == idem.Acquired {
			t.Errorf("after fn ran and its Complete failed, a rerun acquired the key")
		}
		return
	}
	if err != nil || v != 42 {
		t.Fatalf("Do whose Complete was refused for 500ms = %d, %v; want 42: a refused connection never reached the server, so Complete is tried again", v, err)
	}
	f.mustReplay(t, req, []byte("42"))
}
