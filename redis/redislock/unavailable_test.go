package redislock

import (
	"context"
	"errors"
	"strings"
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

// TestBlackHoleIsUnavailable: with Redis behind a connection that accepts
// and never answers, Acquire with a WaitTimeout returns an error wrapping
// lock.ErrUnavailable (with ErrNotAcquired), never contention alone, in
// each of 16 runs, and never hangs past its wait. TryAcquire under a
// deadline says the same.
func TestBlackHoleIsUnavailable(t *testing.T) {
	t.Parallel()
	direct, rdb := newLocker(t, nil)
	p := testenv.NewFaultProxy(t, rdb.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { viaProxy.Close() })
	const wait = 300 * time.Millisecond
	// The test's own prefix: under the default one, the go-redis and
	// rueidis runs of this test (and any other run of the suite on the
	// shared Redis) contended for one "bh" lock, and a lock another run
	// held made the first Acquire fail as "held by another owner".
	l := lockerOn(t, viaProxy, &Config{Prefix: direct.cfg.Prefix, TTL: 10 * time.Second, WaitTimeout: wait})
	ctx := ctxT(t, 60*time.Second)
	// Connections are open before the fault. Setup, not an assertion: on
	// a loaded machine one reply can outlast the 300ms wait, so a few
	// tries are allowed.
	var ls lock.Lease
	var err error
	for try := 0; try < 20; try++ {
		if ls, err = l.Acquire(ctx, "bh"); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("acquire %q through the passing proxy: %v", "bh", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.BlackHole)
	for i := range 16 {
		t0 := time.Now()
		_, err := l.Acquire(ctx, "bh")
		d := time.Since(t0)
		if !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("run %d: %v, want ErrUnavailable (with ErrNotAcquired)", i, err)
		}
		// Not a timing assertion (the machine may be loaded): a hang,
		// not a slow run, fails. The bound itself is WaitTimeout plus
		// abandonTimeout, by construction.
		if d > wait+abandonTimeout+10*time.Second {
			t.Errorf("run %d: Acquire took %v with WaitTimeout %v", i, d, wait)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if _, err := l.TryAcquire(tctx, "bh"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryAcquire: %v, want ErrUnavailable", err)
	}
	p.Set(testenv.Pass)
}

// TestBusyAndReadonlyAreUnavailable: a Redis that answers BUSY (a script
// runs too long) or READONLY (a replica, a demoted primary) cannot serve
// the lock: TryAcquire wraps lock.ErrUnavailable, not ErrNotAcquired.
func TestBusyAndReadonlyAreUnavailable(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	l := lockerOn(t, rdb, &Config{TTL: 10 * time.Second})
	ctx := ctxT(t, 60*time.Second)

	// READONLY: make the private server a replica of a port nobody
	// serves; writes are refused with READONLY.
	if err := rdb.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "ro"); !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("READONLY: %v, want ErrUnavailable only", err)
	}
	if err := rdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}

	// BUSY: a script that runs past busy-reply-threshold.
	if err := rdb.ConfigSet(ctx, "busy-reply-threshold", "10").Err(); err != nil {
		t.Fatal(err)
	}
	other := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { other.Close() })
	running := make(chan error, 1)
	go func() {
		running <- other.Eval(context.Background(), "local t = redis.call('TIME') local s = t[1] while true do local n = redis.call('TIME') if n[1] - s > 3 then return 1 end end", nil).Err()
	}()
	var err error
	for range 200 { // until the script runs past the threshold
		if _, err = l.TryAcquire(ctx, "busy"); err != nil && errors.Is(err, lock.ErrUnavailable) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !errors.Is(err, lock.ErrUnavailable) || errors.Is(err, lock.ErrNotAcquired) || !strings.Contains(err.Error(), "BUSY") {
		t.Errorf("BUSY: %v, want ErrUnavailable only", err)
	}
	_ = rdb.Do(ctx, "SCRIPT", "KILL").Err()
	<-running
}
