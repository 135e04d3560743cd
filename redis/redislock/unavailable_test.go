package redislock

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
)

// TestUnavailableIsNotContention: a lock held by another owner is
// ErrNotAcquired and not ErrUnavailable; Redis refusing connections is
// ErrUnavailable for TryAcquire, and ErrNotAcquired with ErrUnavailable
// for an Acquire whose wait ran out during the outage. Once Redis answers
// again, the same Locker takes the lock.
func TestUnavailableIsNotContention(t *testing.T) {
	t.Parallel()
	direct, rdb := newLocker(t, &Config{TTL: 10 * time.Second, WaitTimeout: 300 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	holder := mustAcquire(t, direct, ctx, "u")
	if _, err := direct.TryAcquire(ctx, "u"); !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryAcquire while held: %v, want ErrNotAcquired only", err)
	}
	if _, err := direct.Acquire(ctx, "u"); !errors.Is(err, lock.ErrNotAcquired) || errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Acquire while held: %v, want ErrNotAcquired only", err)
	}
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}

	p := testenv.NewFaultProxy(t, rdb.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { viaProxy.Close() })
	// A wait of 2s: go-redis spends about 500ms on one attempt while
	// connections are refused (five dials 100ms apart), and only an
	// attempt that ends inside the wait can say why it failed.
	cfg := direct.cfg
	cfg.WaitTimeout = 2 * time.Second
	l := lockerOn(t, viaProxy, &cfg) // rueidis dials here, while the proxy passes
	p.Set(testenv.Refuse)
	if _, err := l.TryAcquire(ctx, "u"); !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire with Redis refusing: %v, want ErrUnavailable only", err)
	}
	if _, err := l.Acquire(ctx, "u"); !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("Acquire with Redis refusing: %v, want ErrNotAcquired and ErrUnavailable", err)
	}
	p.Set(testenv.Pass)
	ls, err := l.Acquire(ctx, "u")
	if err != nil {
		t.Fatalf("Acquire once Redis answers: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
