package redislock

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// New refuses a go-redis client that ignores context deadlines, of every
// client type, and accepts the same clients with ContextTimeoutEnabled.
func TestNewRefusesClientWithoutContextTimeouts(t *testing.T) {
	t.Parallel()
	off := []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}}),
		redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}}),
	}
	on := []redis.UniversalClient{
		redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true}),
		redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}),
		redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}, ContextTimeoutEnabled: true}),
		redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:1"}, ContextTimeoutEnabled: true}),
		struct{ *redis.Client }{redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})}, // a wrapper embedding one
	}
	for _, c := range append(off, on...) {
		t.Cleanup(func() { c.Close() })
	}
	for _, c := range off {
		if _, err := New(c, nil); !errors.Is(err, ErrContextTimeouts) {
			t.Errorf("New(%T without ContextTimeoutEnabled) = %v, want ErrContextTimeouts", c, err)
		}
	}
	for _, c := range on {
		if _, err := New(c, nil); err != nil {
			t.Errorf("New(%T with ContextTimeoutEnabled) = %v", c, err)
		}
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
			// TTL 1.5s, margin 600ms: the old holder stops 600ms before its
			// key can expire, slack for timers on a loaded 2-core CI machine.
			direct, rdb := newLocker(t, &Config{TTL: 1500 * time.Millisecond, SafetyMargin: 600 * time.Millisecond})
			p := testenv.NewFaultProxy(t, rdb.Options().Addr)
			viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: tc.contextTimeouts})
			t.Cleanup(func() { viaProxy.Close() })
			var old *Locker
			if tc.contextTimeouts {
				old = lockerOn(t, viaProxy, &direct.cfg)
			} else {
				if _, err := New(viaProxy, &direct.cfg); !errors.Is(err, ErrContextTimeouts) {
					t.Fatalf("New accepted a client ignoring deadlines: %v", err)
				}
				old = build(redisclient.GoRedis(viaProxy), direct.cfg)
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
				b        *Lease
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
					b, sent, aliveAtB = ls.(*Lease), t0, alive
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

// Same-token recovery end to end: the reply to the first acquire is lost on
// the wire after Redis ran the script (the proxy drops it and stalls the
// connection), the client times out and the next attempt, with the same
// token, gets the lock with the fence Redis drew the first time. WaitTimeout
// is far below the TTL, so without recovery the call could only fail.
func TestLostAcquireReplyRecovered(t *testing.T) {
	t.Parallel()
	direct, rdb := newLocker(t, &Config{TTL: 30 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	warm := mustAcquire(t, direct, ctx, "warmup") // loads the script: the next attempt is one EVALSHA
	if err := warm.Release(ctx); err != nil {
		t.Fatal(err)
	}
	p := testenv.NewFaultProxy(t, rdb.Options().Addr)
	cfg := direct.cfg
	cfg.WaitTimeout = 5 * time.Second
	// Each client gives up on a reply after 500ms: go-redis by ReadTimeout,
	// rueidis by ConnWriteTimeout (it closes a connection whose pipeline
	// stops answering).
	var l *Locker
	switch suiteClient {
	case rueidisClient:
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{p.Addr()}, ConnWriteTimeout: 500 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		l = build(redisclient.Rueidis(c), cfg)
	default:
		viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: 500 * time.Millisecond})
		t.Cleanup(func() { viaProxy.Close() })
		l = build(redisclient.GoRedis(viaProxy), cfg)
	}
	failed := &countFailures{Client: l.c} // acquire attempts that got no reply
	l.c = failed
	// Open every connection before arming the fault, so that it hits the
	// script and not a handshake: rueidis spreads commands over its
	// pipelined connections at random and dials each on first use (64
	// PINGs reach all of them; go-redis reuses its one).
	for range 64 {
		if err := l.c.Do(ctx, "PING", nil).Err(); err != nil {
			t.Fatal(err)
		}
	}
	p.DropNextReply()
	ls := mustAcquire(t, l, ctx, "pay:9")
	if n := failed.n.Load(); n != 1 {
		t.Fatalf("%d acquire attempts lost their reply, want 1", n)
	}
	_, fk := l.keys("pay:9")
	if c, _ := rdb.Get(ctx, fk).Int64(); lock.Fence(c) != ls.Fence() {
		t.Fatalf("fence %d but counter %d: the retry drew a new fence", ls.Fence(), c)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// countFailures counts script runs that failed without a reply from Redis
// (transport or timeout errors).
type countFailures struct {
	redisclient.Client
	n atomic.Int32
}

func (c *countFailures) Eval(ctx context.Context, s *redisclient.Script, keys []string, args ...string) redisclient.Reply {
	r := c.Client.Eval(ctx, s, keys, args...)
	if err := r.Err(); err != nil && !redisclient.IsServerError(err) && !errors.Is(err, redisclient.ErrNil) {
		c.n.Add(1)
	}
	return r
}

// Inside lock.Do, lock.Valid(ctx) is the lease's Valid, also on a context
// derived from fn's: nil while the lock is held, the loss once the watchdog
// has seen another owner in the key.
func TestDoValid(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, &Config{TTL: 500 * time.Millisecond})
	ctx := ctxT(t, 30*time.Second)
	if err := lock.Valid(ctx); err == nil {
		t.Fatal("lock.Valid outside Do returned nil")
	}
	err := lock.Do(ctx, l, "do", func(ctx context.Context, fence lock.Fence) error {
		sub, cancel := context.WithCancel(ctx)
		defer cancel()
		if err := lock.Valid(sub); err != nil {
			t.Errorf("Valid while held: %v", err)
		}
		key, _ := l.keys("do")
		rdb.Set(ctx, key, "someone-else:", time.Minute) // the lock is taken over
		<-ctx.Done()
		if err := lock.Valid(sub); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Valid after the takeover: %v, want ErrNotHeld", err)
		}
		return nil
	})
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Do: %v, want the release to report ErrNotHeld", err)
	}
}
