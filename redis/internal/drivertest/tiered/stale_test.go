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
	// The retry after the flush must come well within the retention (it
	// comes a third of it after the first call): 3s leaves a loaded machine
	// 2s for it, 1.5s left only 1s.
	const retention = 3 * time.Second
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

// TestSkippedFastClearedAtComplete: the durable store grants a key while
// the fast store is skipped (after a failure), and Redis still holds a
// completed record of another request under it. When the claim completes
// and Redis is asked again, that record is deleted: the old request's
// retries are mismatches, never a replay of the stale result.
func TestSkippedFastClearedAtComplete(t *testing.T) {
	base := fastOnShared(t)
	fast := &spyStore{Store: base}
	// Begin(new) must fall inside the backoff that the refused Begin starts
	// (the test checks it did): 2s, so that a loaded machine cannot spend it
	// between the two calls, as it could 200ms.
	const backoff = 2 * time.Second
	s := newTiered(t, fast, durableInMemory(t), &tiered.Config{FastTimeout: 2 * time.Second, FastBackoff: backoff})
	ctx := ctxT(t)
	key := newKey()
	old := idem.BeginRequest{Key: key, Fingerprint: idem.FingerprintOf([]byte("old")), Lease: time.Minute}
	c, err := base.Begin(ctx, old) // the stale copy, in Redis only
	if err != nil {
		t.Fatal(err)
	}
	if err := base.Complete(ctx, c.Owner, []byte("stale")); err != nil {
		t.Fatal(err)
	}

	fast.refuseBegin.Store(true)
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: newKey()}); err != nil { // fails fast, starts the backoff
		t.Fatal(err)
	}
	fast.refuseBegin.Store(false)
	nu := old
	nu.Fingerprint = idem.FingerprintOf([]byte("new"))
	before := fast.begins.Load()
	got, err := s.Begin(ctx, nu)
	if err != nil || got.Outcome != idem.Acquired {
		t.Fatalf("Begin(new) = %+v, %v; want Acquired", got, err)
	}
	if fast.begins.Load() != before {
		t.Fatalf("the fast store was asked during the backoff; the test needs it skipped")
	}
	time.Sleep(backoff) // Redis is asked again from now on
	if err := s.Complete(ctx, got.Owner, []byte("fresh")); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Get(ctx, key); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("stale fast record after Complete: %v; want it deleted", err)
	}
	if d, err := s.Begin(ctx, old); err != nil || d.Outcome != idem.Mismatch {
		t.Errorf("retry of the old request = %+v, %v; want Mismatch", d, err)
	}
	if d, err := s.Begin(ctx, nu); err != nil || d.Outcome != idem.Replay || string(d.Result) != "fresh" {
		t.Errorf("retry of the new request = %+v, %v; want Replay of fresh", d, err)
	}
}

// TestFastSnapshotRestore: Redis restarts from a snapshot older than the
// last writes. A completed copy in the snapshot replays the result the
// durable store holds; an in-progress copy answers InFlight until its
// lease ends, then the durable store replays; nothing executes twice.
func TestFastSnapshotRestore(t *testing.T) {
	fast, rc, srv := fastOnPrivate(t)
	s := newTiered(t, fast, durableInMemory(t), healthy)
	ctx := ctxT(t)
	// running's claim must outlive SAVE and its Complete on a loaded
	// machine (300ms need not); the restored in-progress copy then answers
	// InFlight for up to one lease before the durable result is replayed.
	const lease = 2 * time.Second
	var runs atomic.Int32
	work := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { runs.Add(1); return v, nil }
	}
	done, running := newKey(), newKey()
	opts := &idem.Options{Lease: lease}
	if _, err := idem.Do(ctx, s, done, opts, work("done")); err != nil {
		t.Fatal(err)
	}
	c, err := s.Begin(ctx, idem.BeginRequest{Key: running, Lease: lease})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", c, err)
	}
	if err := rc.Save(ctx).Err(); err != nil { // done completed, running in progress
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c.Owner, []byte(`"running"`)); err != nil {
		t.Fatal(err)
	}
	runs.Add(1)
	srv.Kill()
	srv.Start() // from the snapshot
	if rec, err := fast.Get(ctx, running); err != nil || rec.State != idem.StateInProgress {
		t.Fatalf("restored copy of running = %+v, %v; want the older in-progress copy", rec, err)
	}
	if v, err := idem.Do(ctx, s, done, opts, work("again")); err != nil || v != "done" {
		t.Errorf("done after the restore = %q, %v", v, err)
	}
	waitOpts := &idem.Options{Lease: lease, Wait: true, PollInterval: 20 * time.Millisecond}
	if v, err := idem.Do(ctx, s, running, waitOpts, work("again")); err != nil || v != "running" {
		t.Errorf("running after the restore = %q, %v; want the durable result", v, err)
	}
	if runs.Load() != 2 {
		t.Errorf("%d executions, want 2", runs.Load())
	}
}

// TestRepairAfterSkippedComplete: as TestSkippedFastClearedAtComplete, but
// the claim completes while Redis is still skipped. The key is queued, and
// the first Begin after the backoff (of any key) deletes the stale record.
func TestRepairAfterSkippedComplete(t *testing.T) {
	base := fastOnShared(t)
	fast := &spyStore{Store: base}
	// Begin(new), Complete and the check that the stale record is still
	// there must fall inside the backoff (the test checks they did): 2s, not
	// the 300ms a loaded machine can spend on them.
	const backoff = 2 * time.Second
	s := newTiered(t, fast, durableInMemory(t), &tiered.Config{FastTimeout: 2 * time.Second, FastBackoff: backoff})
	ctx := ctxT(t)
	key := newKey()
	old := idem.BeginRequest{Key: key, Fingerprint: idem.FingerprintOf([]byte("old")), Lease: time.Minute}
	c, err := base.Begin(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	if err := base.Complete(ctx, c.Owner, []byte("stale")); err != nil {
		t.Fatal(err)
	}
	fast.refuseBegin.Store(true)
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: newKey()}); err != nil {
		t.Fatal(err)
	}
	fast.refuseBegin.Store(false)
	nu := old
	nu.Fingerprint = idem.FingerprintOf([]byte("new"))
	before := fast.calls()
	got, err := s.Begin(ctx, nu)
	if err != nil || got.Outcome != idem.Acquired {
		t.Fatalf("Begin(new) = %+v, %v", got, err)
	}
	if err := s.Complete(ctx, got.Owner, []byte("fresh")); err != nil {
		t.Fatal(err)
	}
	if fast.calls() != before {
		t.Fatalf("the fast store was called during the backoff; the test needs it skipped")
	}
	if _, err := base.Get(ctx, key); err != nil {
		t.Fatalf("stale record gone already: %v; the test needs it kept until the repair", err)
	}
	time.Sleep(backoff)
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: newKey()}); err != nil { // any key: the repair runs first
		t.Fatal(err)
	}
	if _, err := base.Get(ctx, key); !errors.Is(err, idem.ErrNotFound) {
		t.Errorf("stale fast record after the repair: %v; want it deleted", err)
	}
	if d, err := s.Begin(ctx, old); err != nil || d.Outcome != idem.Mismatch {
		t.Errorf("retry of the old request = %+v, %v; want Mismatch", d, err)
	}
}
