package tiered_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/tiered"
)

// TestRefillNeverOutlivesDurable: a durable Replay copied into Redis (after
// a flush) expires with the durable record, not a full retention later. So
// once the durable record is gone and the operation ran again (through a
// path that did not see Redis), no retry is answered with the older result.
func TestRefillNeverOutlivesDurable(t *testing.T) {
	fast, rc, _ := fastOnPrivate(t)
	durable := durableInMemory(t)
	s := newTiered(t, fast, durable, healthy)
	// The same durable store with the fast store unreachable: the path a
	// request takes while Redis is skipped after a failure.
	skipping := newTiered(t, fastUnreachable(t), durable, &tiered.Config{FastBackoff: -1})
	ctx := ctxT(t)
	const retention = 1500 * time.Millisecond
	key := newKey()
	opts := &idem.Options{Lease: retention, Retention: retention}
	var runs atomic.Int32
	run := func(st idem.Store) string {
		t.Helper()
		v, err := idem.Do(ctx, st, key, opts, func(context.Context) (string, error) {
			if runs.Add(1) == 1 {
				return "first", nil
			}
			return "second", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := run(s); v != "first" {
		t.Fatalf("first call = %q", v)
	}
	created, err := durable.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	// Redis loses the copy; a retry a while later refills it.
	time.Sleep(retention / 3)
	if err := rc.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if v := run(s); v != "first" {
		t.Fatalf("retry after the flush = %q", v)
	}
	cp, err := fast.Get(ctx, key)
	if err != nil || cp.State != idem.StateCompleted {
		t.Fatalf("refilled copy = %+v, %v; want completed", cp, err)
	}
	if cp.ExpiresAt.After(created.ExpiresAt) {
		t.Fatalf("the copy expires at %v, after the durable record (%v)", cp.ExpiresAt, created.ExpiresAt)
	}

	// The durable record expires and is purged.
	for {
		if n, err := durable.Purge(ctx, 0, 100); err != nil {
			t.Fatal(err)
		} else if n == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A request while Redis is skipped executes again: the record is gone.
	if v := run(skipping); v != "second" {
		t.Fatalf("call after the purge = %q, want a second execution", v)
	}
	// From now on every retry sees the second result, never the first.
	for i := 0; i < 3; i++ {
		if v := run(s); v != "second" {
			t.Fatalf("retry %d after the second execution = %q, want \"second\"", i, v)
		}
	}
	if runs.Load() != 2 {
		t.Errorf("%d executions, want 2", runs.Load())
	}
}

// TestGrantOverwritesStaleFast: Redis still holds a completed record of
// another request under the key (the durable record of it was lost, purged
// or expired first). When the durable store grants the key to a new
// request, Redis is made to show that claim: its duplicates wait, the old
// request's retries are mismatches and never replay the stale result, and
// the new result is replayed from Redis.
func TestGrantOverwritesStaleFast(t *testing.T) {
	fast := fastOnShared(t)
	durable := &spyStore{Store: durableInMemory(t)}
	s := newTiered(t, fast, durable, healthy)
	ctx := ctxT(t)
	key := newKey()
	old := idem.BeginRequest{Key: key, Fingerprint: idem.FingerprintOf([]byte("old")), Lease: time.Minute}
	// The stale copy: in Redis only.
	c, err := fast.Begin(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := fast.Complete(ctx, c.Owner, []byte("stale")); err != nil {
		t.Fatal(err)
	}

	nu := old
	nu.Fingerprint = idem.FingerprintOf([]byte("new"))
	got, err := s.Begin(ctx, nu)
	if err != nil || got.Outcome != idem.Acquired {
		t.Fatalf("Begin(new) = %+v, %v; want Acquired from the durable store", got, err)
	}
	if rec, err := fast.Get(ctx, key); err != nil || rec.State != idem.StateInProgress || rec.Fingerprint != nu.Fingerprint {
		t.Fatalf("fast record after the grant = %+v, %v; want the new claim in progress", rec, err)
	}
	before := durable.calls()
	if d, err := s.Begin(ctx, nu); err != nil || d.Outcome != idem.InFlight {
		t.Errorf("duplicate of the new request = %+v, %v; want InFlight", d, err)
	}
	if durable.calls() != before {
		t.Errorf("the duplicate asked the durable store; Redis should have answered")
	}
	if d, err := s.Begin(ctx, old); err != nil || d.Outcome != idem.Mismatch {
		t.Errorf("retry of the old request = %+v, %v; want Mismatch", d, err)
	}
	if err := s.Complete(ctx, got.Owner, []byte("fresh")); err != nil {
		t.Fatal(err)
	}
	before = durable.calls()
	if d, err := s.Begin(ctx, nu); err != nil || d.Outcome != idem.Replay || string(d.Result) != "fresh" {
		t.Errorf("retry of the new request = %+v, %v; want Replay of fresh", d, err)
	}
	if durable.calls() != before {
		t.Errorf("the replay asked the durable store")
	}
	if d, err := s.Begin(ctx, old); err != nil || d.Outcome != idem.Mismatch {
		t.Errorf("retry of the old request after the new one completed = %+v, %v; want Mismatch", d, err)
	}
}

// TestStaleFastClearedOnReplay: Redis holds another request's record, the
// durable store a completed one: the durable store replays, and the stale
// copy is cleared so that the next retry refills Redis from the durable
// record.
func TestStaleFastClearedOnReplay(t *testing.T) {
	fast := fastOnShared(t)
	durable := durableInMemory(t)
	s := newTiered(t, fast, durable, healthy)
	ctx := ctxT(t)
	key := newKey()
	a := idem.BeginRequest{Key: key, Fingerprint: idem.FingerprintOf([]byte("a")), Lease: time.Minute}
	c, err := durable.Begin(ctx, a) // durable only: Redis never saw it
	if err != nil {
		t.Fatal(err)
	}
	if err := durable.Complete(ctx, c.Owner, []byte("ra")); err != nil {
		t.Fatal(err)
	}
	b := a
	b.Fingerprint = idem.FingerprintOf([]byte("b"))
	fc, err := fast.Begin(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if err := fast.Complete(ctx, fc.Owner, []byte("rb")); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Begin(ctx, a); err != nil || d.Outcome != idem.Replay || string(d.Result) != "ra" {
		t.Fatalf("Begin(a) = %+v, %v; want the durable Replay", d, err)
	}
	if _, err := fast.Get(ctx, key); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("stale fast record after the durable Replay: %v; want it cleared", err)
	}
	if d, err := s.Begin(ctx, b); err != nil || d.Outcome != idem.Mismatch {
		t.Errorf("Begin(b) = %+v, %v; want Mismatch, never the stale rb", d, err)
	}
	if d, err := s.Begin(ctx, a); err != nil || d.Outcome != idem.Replay || string(d.Result) != "ra" {
		t.Fatalf("Begin(a) again = %+v, %v", d, err)
	}
	if rec, err := fast.Get(ctx, key); err != nil || rec.State != idem.StateCompleted || string(rec.Result) != "ra" {
		t.Errorf("fast record after the refill = %+v, %v; want a's result", rec, err)
	}
}
