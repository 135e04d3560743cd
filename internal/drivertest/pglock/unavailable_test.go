package pglock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

// TestUnavailableIsNotContention: a lock held by another session is
// ErrNotAcquired and not ErrUnavailable; a server that refuses connections
// is ErrUnavailable and not ErrNotAcquired, for TryAcquire and Acquire
// alike, and Acquire returns at once instead of waiting out its timeout.
// Once the server answers again, the same Locker takes the lock.
func TestUnavailableIsNotContention(t *testing.T) {
	t.Parallel()
	l, _, dsn := setup(t, 4, &pglock.Config{WaitTimeout: 300 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	holder := mustAcquire(t, l, ctx, "u")
	for name, acquire := range map[string]func() error{
		"TryAcquire": func() error { _, err := l.TryAcquire(ctx, "u"); return err },
		"Acquire":    func() error { _, err := l.Acquire(ctx, "u"); return err },
	} {
		if err := acquire(); !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrUnavailable) {
			t.Errorf("%s while held: %v, want ErrNotAcquired only", name, err)
		}
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}

	db, p := testenv.PostgresViaProxy(t, dsn)
	cfg := configOf(l)
	cfg.WaitTimeout = 20 * time.Second // an outage must not be waited out
	via, err := pglock.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.Refuse)
	for name, acquire := range map[string]func() error{
		"TryAcquire": func() error { _, err := via.TryAcquire(ctx, "u"); return err },
		"Acquire":    func() error { _, err := via.Acquire(ctx, "u"); return err },
	} {
		t0 := time.Now()
		err := acquire()
		if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("%s with the server refusing: %v, want ErrUnavailable only", name, err)
		}
		if d := time.Since(t0); d > 10*time.Second {
			t.Errorf("%s waited %v through an outage", name, d)
		}
	}
	p.Set(testenv.Pass)
	ls, err := via.Acquire(ctx, "u")
	if err != nil {
		t.Fatalf("Acquire once the server answers: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestBlackHoleIsUnavailable: with PostgreSQL behind a connection that
// accepts and never answers, Acquire with a WaitTimeout returns an error
// wrapping lock.ErrUnavailable (with ErrNotAcquired), never contention
// alone, in each of 16 runs: on the pooled connection that was open before
// the fault, and on the new ones the pool cannot finish opening.
func TestBlackHoleIsUnavailable(t *testing.T) {
	t.Parallel()
	_, _, dsn := setup(t, 4, nil)
	db, p := testenv.PostgresViaProxy(t, dsn)
	l, err := pglock.New(db, &pglock.Config{WaitTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 60*time.Second)
	// A connection is open before the fault: taken through a Locker on the
	// same pool with a generous wait, since on a busy machine opening the
	// first connection through the proxy can take longer than l's 300 ms
	// (CI beside a CPU hog: "not acquired … context deadline exceeded").
	warm, err := pglock.New(db, &pglock.Config{WaitTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ls := mustAcquire(t, warm, ctx, "bh")
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.BlackHole)
	for i := range 16 {
		if _, err := l.Acquire(ctx, "bh"); !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("run %d: %v, want ErrUnavailable (with ErrNotAcquired)", i, err)
		}
	}
	p.Set(testenv.Pass)
}
