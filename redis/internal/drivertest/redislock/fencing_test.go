package redislock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/redislock"
)

// The fencing tests of redislock whose storage side is a SQLite table: the
// lock's fences, and the database refusing a stale holder's write.

// The first classic lock failure: the holder outlives its TTL. A stolen key (deleted and
// taken by B) makes A's next renewal fail with ErrNotHeld: A's context is
// cancelled, A's release does not delete B's key, and A's fenced write is
// refused by the database.
func TestLostLeaseNotHeld(t *testing.T) {
	t.Parallel()
	// 3s: A's next renewal must see B's key (ErrNotHeld), not be overtaken
	// by A's local deadline on a loaded machine (ErrExpired), as with 500ms
	// (283ms for a renewal to come back); B must outlive the test.
	l, rdb := newLocker(t, &redislock.Config{TTL: 3 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	db := fencedSQLite(t)

	a := mustAcquire(t, l, ctx, "acct:7")
	key, _ := lockKeys(configOf(l), "acct:7")
	rdb.Del(ctx, key) // A's lock vanishes as if its TTL had elapsed
	b := mustAcquire(t, l, ctx, "acct:7")
	if b.Fence() <= a.Fence() {
		t.Fatalf("B's fence %d not above A's %d", b.Fence(), a.Fence())
	}
	if err := accounts.Update(ctx, db, 7, b.Fence(), "balance = ?", 50); err != nil {
		t.Fatalf("B's fenced write: %v", err)
	}

	cause := waitDone(t, a.Context())
	if !errors.Is(cause, lock.ErrNotHeld) {
		t.Fatalf("A's cause = %v, want ErrNotHeld", cause)
	}
	err := accounts.Update(ctx, db, 7, a.Fence(), "balance = ?", 999)
	var stale *lock.StaleFenceError
	if !errors.As(err, &stale) || !errors.Is(err, lock.ErrStaleFence) || stale.Current != b.Fence() {
		t.Fatalf("A's fenced write: %v, want StaleFenceError with current %d", err, b.Fence())
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("A's release: %v, want ErrNotHeld", err)
	}
	if v := rdb.Get(ctx, key).Val(); !strings.HasPrefix(v, b.Token()+":") {
		t.Fatalf("A's release touched B's key: value %q", v)
	}
	if got := balance(t, db, 7); got != 50 {
		t.Fatalf("balance %d, want B's 50", got)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// The scenario: the holder's Redis is black-holed (a partition TCP
// does not notice) while it holds the lock. Its renewals get no answer. The
// holder's context must end before a new holder can acquire the lock once
// its key expires in Redis, with no call to Redis on that path.
//
// Zero overlap is measured on this process's monotonic clock: before each of
// the new holder's attempts the test notes whether the old holder's context
// is still alive and when the attempt was sent; the attempt that wins must
// have seen the old context already ended. The old holder's local deadline
// (Lease.Deadline) must also lie before that attempt was sent.
//
// Two clients: one with ContextTimeoutEnabled, and one that ignores context
// deadlines (go-redis defaults: 3s read timeout, 3 retries), smuggled past
// New's check, so that its renewal call hangs for many TTLs. Both must show
// zero overlap: the deadline never waits for the call.
func TestBlackHoledHolderStopsBeforeNextHolder(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name            string
		contextTimeouts bool
	}{
		{"ContextTimeoutEnabled", true},
	}
	if suiteClient == goRedisClient {
		// rueidis has no mode that ignores deadlines.
		cases = append(cases, struct {
			name            string
			contextTimeouts bool
		}{"client ignoring deadlines", false})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// TTL 4.5s, margin 1.5s: the old holder stops 1.5s before its key
			// can expire, slack for timers on a loaded 2-core CI machine, and
			// the new holder's renewals (every 1.5s) have 1.5s each to come
			// back (with 1.5s/600ms they had 400ms).
			direct, rdb := newLocker(t, &redislock.Config{TTL: 4500 * time.Millisecond, SafetyMargin: 1500 * time.Millisecond})
			p := testenv.NewFaultProxy(t, rdb.Options().Addr)
			viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: tc.contextTimeouts})
			t.Cleanup(func() { viaProxy.Close() })
			var old *redislock.Locker
			cfg := configOf(direct)
			if tc.contextTimeouts {
				old = lockerOn(t, viaProxy, &cfg)
			} else {
				_, err := redislock.New(viaProxy, &cfg)
				configtest.Want(t, err, "redislock", "client") // a client ignoring deadlines
				old, err = redislock.New(deadlineBlind{viaProxy}, &cfg)
				if err != nil {
					t.Fatal(err)
				}
			}
			ctx := ctxT(t, 60*time.Second)
			db := fencedSQLite(t)

			a := mustAcquire(t, old, ctx, "acct:7")
			if err := accounts.Update(ctx, db, 7, a.Fence(), "balance = ?", 1); err != nil {
				t.Fatal(err)
			}
			p.Set(testenv.BlackHole)
			blackholed := time.Now()

			var (
				b        *redislock.Lease
				sent     time.Time
				aliveAtB bool
				attempts int
			)
			for {
				attempts++
				alive := a.Context().Err() == nil
				t0 := time.Now()
				ls, err := direct.TryAcquire(ctx, "acct:7")
				if err == nil {
					b, sent, aliveAtB = ls.(*redislock.Lease), t0, alive
					break
				}
				if !errors.Is(err, lock.ErrNotAcquired) {
					t.Fatal(err)
				}
				time.Sleep(5 * time.Millisecond)
			}
			if aliveAtB {
				t.Fatalf("overlap: the old holder's context was still alive when the new holder's winning attempt was sent (attempt %d)", attempts)
			}
			if !a.Deadline().Before(sent) {
				t.Fatalf("overlap: old holder's local deadline %v after the new holder's acquisition at %v (since the black hole)",
					a.Deadline().Sub(blackholed), sent.Sub(blackholed))
			}
			cause := context.Cause(a.Context())
			if !errors.Is(cause, lock.ErrExpired) {
				t.Fatalf("old holder's cause %v, want ErrExpired", cause)
			}
			if err := a.Valid(); !errors.Is(err, lock.ErrExpired) {
				t.Fatalf("old holder's Valid() = %v, want ErrExpired", err)
			}
			t.Logf("black hole at 0; old holder's deadline at %v; new holder acquired at %v (attempt %d)",
				a.Deadline().Sub(blackholed), sent.Sub(blackholed), attempts)

			if b.Fence() <= a.Fence() {
				t.Fatalf("fences: new %d, old %d", b.Fence(), a.Fence())
			}
			if err := accounts.Update(ctx, db, 7, b.Fence(), "balance = ?", 2); err != nil {
				t.Fatal(err)
			}
			if err := accounts.Update(ctx, db, 7, a.Fence(), "balance = ?", 3); !errors.Is(err, lock.ErrStaleFence) {
				t.Fatalf("old holder's write: %v, want ErrStaleFence", err)
			}
			// Heal the network: the old holder's release (after its hung
			// renewal gives up) must not touch the new holder's lock.
			p.Set(testenv.Pass)
			if err := a.Release(ctx); !lock.IsLost(err) {
				t.Fatalf("old holder's release: %v, want a lost lease", err)
			}
			if err := b.Valid(); err != nil {
				t.Fatalf("new holder invalid after the old one's release: %v", err)
			}
			if err := b.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// deadlineBlind is a go-redis client that ignores context deadlines yet
// reports options that honour them: a wrapper that misreports its client
// gets past New's check, which is how a Locker ends up on such a client.
type deadlineBlind struct{ *redis.Client }

func (c deadlineBlind) Options() *redis.Options {
	o := *c.Client.Options()
	o.ContextTimeoutEnabled = true
	return &o
}
