package shop

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/lock"
)

// A holder that keeps working keeps its lock past the TTL (renewed every
// TTL/3, as redislock's watchdog does): on a busy machine a normal request
// outlasted the bare 500 ms lease, lost the lock, and the disciplined shop
// refused the order. A holder that stalls (renewals stopped with it) loses
// the lock after the TTL, and the next holder gets a higher fence.
func TestMemLockerRenewsUnlessStalled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m := newMemLocker(time.Second)

	le, err := m.TryAcquire(ctx, "stock:apple")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond) // working: the renewals run
	if err := le.Valid(); err != nil {
		t.Fatalf("a working holder lost its lock after 2.5 TTLs: %v", err)
	}
	if _, err := m.TryAcquire(ctx, "stock:apple"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire while held: %v, want ErrNotAcquired", err)
	}
	if err := le.Release(ctx); err != nil {
		t.Fatal(err)
	}

	short := newMemLocker(200 * time.Millisecond)
	le, err = short.TryAcquire(ctx, "stock:pear")
	if err != nil {
		t.Fatal(err)
	}
	le.(*memLease).Stall(600 * time.Millisecond)
	select {
	case <-le.Context().Done():
	case <-ctx.Done():
		t.Fatal("a stalled holder kept its lock")
	}
	if err := context.Cause(le.Context()); !errors.Is(err, lock.ErrExpired) {
		t.Fatalf("cause %v, want ErrExpired", err)
	}
	next, err := short.Acquire(ctx, "stock:pear")
	if err != nil {
		t.Fatalf("Acquire after the stalled holder's TTL: %v", err)
	}
	if next.Fence() <= le.Fence() {
		t.Errorf("fence %d after %d: want higher", next.Fence(), le.Fence())
	}
	if err := le.Release(ctx); !errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, lock.ErrExpired) {
		t.Errorf("the stalled holder's Release: %v, want ErrNotHeld or ErrExpired", err)
	}
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
