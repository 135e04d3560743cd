package redislock

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/lock"
)

// A same-token recovery reports the counter as its fence. If RaiseFence ran
// while the lock was held, the counter is min+1, reserved for the holder:
// never min, which an earlier holder may have used; and the next acquisition
// gets a fence above it.
func TestRecoveryAfterRaiseWhileHeld(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t, &Config{TTL: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	key, fk := l.keys("r")
	value := newValue()
	run := func() []int64 {
		res, err := l.c.Eval(ctx, acquireScript, []string{key, fk}, value, "5000", "0").Int64s()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := run() // its reply "lost"
	min := lock.Fence(first[0] + 1000)
	got, err := l.RaiseFence(ctx, "r", min)
	if err != nil || got != min+1 {
		t.Fatalf("RaiseFence while held = %d, %v; want %d", got, err, min+1)
	}
	again := run()
	if lock.Fence(again[0]) != min+1 {
		t.Fatalf("recovery after raise: fence %d, want the reserved %d (not %d)", again[0], min+1, min)
	}
	abandonAndCheckNext(t, l, key, value, min+1)
}

// A recovery whose counter vanished (expired, evicted) draws a new fence,
// restarted from the server clock: above the one the lost reply carried.
func TestRecoveryWithLostCounter(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, &Config{TTL: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	key, fk := l.keys("c")
	value := newValue()
	first, err := l.c.Eval(ctx, acquireScript, []string{key, fk}, value, "5000", "0").Int64s()
	if err != nil {
		t.Fatal(err)
	}
	rdb.Del(ctx, fk)
	again, err := l.c.Eval(ctx, acquireScript, []string{key, fk}, value, "5000", "0").Int64s()
	if err != nil {
		t.Fatal(err)
	}
	if again[0] <= first[0] {
		t.Fatalf("recovery without counter: fence %d, not above %d", again[0], first[0])
	}
	if c, _ := rdb.Get(ctx, fk).Int64(); c != again[0] {
		t.Fatalf("counter %d after recovery with fence %d", c, again[0])
	}
	abandonAndCheckNext(t, l, key, value, lock.Fence(again[0]))
}

// abandonAndCheckNext releases the recovered lock and checks that the next
// holder's fence is above last.
func abandonAndCheckNext(t *testing.T, l *Locker, key, value string, last lock.Fence) {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	l.abandon(ctx, key, value)
	ls, err := l.TryAcquire(ctx, key[len(l.cfg.Prefix)+1:len(key)-1])
	if err != nil {
		t.Fatal(err)
	}
	if ls.Fence() <= last {
		t.Errorf("next fence %d, not above %d", ls.Fence(), last)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Tokens are unique and never contain ':', the end of the token in the lock
// value.
func TestLockValueFormat(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 1000 {
		v := newValue()
		if len(v) != tokenLen+1 || v[tokenLen] != ':' {
			t.Fatalf("value %q", v)
		}
		for _, c := range v[:tokenLen] {
			if c == ':' {
				t.Fatalf("token in %q contains ':'", v)
			}
		}
		if seen[v] {
			t.Fatalf("value %q twice", v)
		}
		seen[v] = true
	}
}

// One Locker's watchdog renews many leases on one timer: leases taken at
// different moments all stay alive past several TTLs, and releasing one from
// the middle of the queue disturbs none of the others.
func TestWatchdogRenewsManyLeases(t *testing.T) {
	t.Parallel()
	// Each renewal has 1.7s to come back before the local deadline: only a
	// broken watchdog, not a loaded machine (450ms failed there), loses one.
	const ttl = 3 * time.Second
	l, rdb := newLocker(t, &Config{TTL: ttl})
	ctx := ctxT(t, 30*time.Second)
	var leases []*Lease
	for i := range 6 {
		leases = append(leases, mustAcquire(t, l, ctx, "many"+string(rune('a'+i))))
		time.Sleep(ttl / 10)
	}
	if err := leases[2].Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	for i, ls := range leases {
		if i == 2 {
			continue
		}
		if err := ls.Context().Err(); err != nil {
			t.Fatalf("lease %d lost: %v", i, context.Cause(ls.Context()))
		}
		if v := rdb.Get(ctx, ls.key).Val(); v != ls.value {
			t.Fatalf("lease %d: key holds %q after three TTLs", i, v)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	l.wd.mu.Lock()
	n := len(l.wd.queue)
	l.wd.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d leases still queued after Release", n)
	}
}

func TestRaiseFenceBound(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t, nil)
	if _, err := l.RaiseFence(ctxT(t, 5*time.Second), "b", maxFence); err == nil {
		t.Fatal("RaiseFence(2^53) succeeded")
	}
}
