package fsm_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/redislock"
	"github.com/redis/go-redis/v9"
)

// A worker holds a Redis lock on an order and moves it with its fence. Its
// Redis connection is black-holed: its lock expires, its lease is
// cancelled, and a second worker takes the lock with a larger fence and
// pays the order. The first worker, still running (it has not looked at its
// context), tries to cancel the order, a transition the machine allows from
// PAID, and to pay it again: both are refused with a stale fence and write
// nothing. Without the fence the cancel would apply. The second worker can
// fire several transitions with its one fence.
func TestFenceStopsLostLockHolder(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		m := e.machine(&fsm.Config{FenceColumn: "fence"})
		e.insert(1, "CREATED", 0)

		r := testenv.UseRedis(t)
		p := testenv.NewFaultProxy(t, r.Addr)
		lockers := make([]*redislock.Locker, 2)
		for i, addr := range []string{p.Addr(), r.Addr} {
			rdb := redis.NewClient(&redis.Options{Addr: addr, Username: r.Username, Password: r.Password, DB: r.DB, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			l, err := redislock.New(rdb, &redislock.Config{Prefix: r.Prefix, TTL: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			lockers[i] = l
		}

		a, err := lockers[0].Acquire(ctx, "order:1")
		if err != nil {
			t.Fatal(err)
		}
		p.Set(testenv.BlackHole)
		<-a.Context().Done() // A's lock may have expired: its lease says so
		if cause := context.Cause(a.Context()); !errors.Is(cause, lock.ErrExpired) {
			t.Fatalf("A's cause %v, want ErrExpired", cause)
		}
		b, err := lockers[1].Acquire(ctx, "order:1") // waits for A's key to expire in Redis
		if err != nil {
			t.Fatal(err)
		}
		if b.Fence() <= a.Fence() {
			t.Fatalf("fences: B %d, A %d", b.Fence(), a.Fence())
		}
		if res, err := m.Fire(ctx, e.db, int64(1), "pay", &fsm.Options{Fence: b.Fence(), Set: map[string]any{"paid_at": "by B"}}); err != nil || res.Outcome != fsm.Applied {
			t.Fatalf("B pays: %+v, %v", res, err)
		}

		for _, tr := range []string{"cancel", "pay"} {
			_, err := m.Fire(ctx, e.db, int64(1), tr, &fsm.Options{Fence: a.Fence(), Set: map[string]any{"note": "by A"}})
			var stale *lock.StaleFenceError
			if !errors.As(err, &stale) || !errors.Is(err, lock.ErrStaleFence) || stale.Current != b.Fence() || stale.Fence != a.Fence() {
				t.Fatalf("A fires %q with its stale fence: %v, want a StaleFenceError (current %d)", tr, err, b.Fence())
			}
		}
		if r := e.row(1); r.State != "PAID" || r.Note.Valid || r.PaidAt.String != "by B" {
			t.Fatalf("row after the stale holder's attempts: %+v", r)
		}

		if res, err := m.Fire(ctx, e.db, int64(1), "ship", &fsm.Options{Fence: b.Fence()}); err != nil || res.Outcome != fsm.Applied {
			t.Fatalf("B ships with the same fence: %+v, %v", res, err)
		}
		if res, err := m.Fire(ctx, e.db, int64(1), "ship", &fsm.Options{Fence: b.Fence()}); err != nil || res.Outcome != fsm.Duplicate {
			t.Fatalf("B ships again: %+v, %v, want Duplicate", res, err)
		}
		var fence int64
		if err := e.db.QueryRowContext(ctx, "SELECT fence FROM "+e.table+" WHERE id = "+e.ph(1), 1).Scan(&fence); err != nil || lock.Fence(fence) != b.Fence() {
			t.Fatalf("row fence %d, %v; want B's %d", fence, err, b.Fence())
		}
		if err := b.Release(ctx); err != nil {
			t.Fatal(err)
		}
		p.Set(testenv.Pass)
		if err := a.Release(ctx); !lock.IsLost(err) {
			t.Fatalf("A's release: %v, want a lost lease", err)
		}
	})
}
