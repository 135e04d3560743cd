package redislock

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
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
		_, err := New(c, nil)
		configtest.Want(t, err, "redislock", "client")
		if err != nil && !strings.Contains(err.Error(), "ContextTimeoutEnabled") {
			t.Errorf("New(%T without ContextTimeoutEnabled) = %v, want it to name ContextTimeoutEnabled", c, err)
		}
	}
	for _, c := range on {
		if _, err := New(c, nil); err != nil {
			t.Errorf("New(%T with ContextTimeoutEnabled) = %v", c, err)
		}
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
	// A renewal slower than the 283ms a 500ms TTL leaves would end the lease
	// at its deadline (ErrExpired) before any renewal saw the takeover: 3s.
	l, rdb := newLocker(t, &Config{TTL: 3 * time.Second})
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
