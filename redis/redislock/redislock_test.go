package redislock

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/redis/internal/redistest"
)

// TestMain runs the whole suite twice: on go-redis, then on rueidis (see
// suiteClient). Each pass is leak-checked.
func TestMain(m *testing.M) {
	if crashChild() || pauseChild() {
		return
	}
	testenv.RaiseParallel(8) // the fault tests wait on TTLs and restarts
	os.Exit(testenv.RunOnEachRedisClient(m, "redislock", &suiteClient, testenv.RueidisLeakOptions()...))
}

// newLocker returns a Locker on the shared Redis under the test's prefix.
func newLocker(t *testing.T, cfg *Config) (*Locker, *redis.Client) {
	t.Helper()
	shared, prefix := redistest.RedisClient(t)
	opt := *shared.Options()
	opt.ContextTimeoutEnabled = true // New refuses a client without it
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { rdb.Close() })
	c := Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = prefix + "lock:"
	return lockerOn(t, rdb, &c), rdb
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// waitDone waits (up to a generous bound, never as an assertion on speed)
// for ctx to be cancelled and returns its cause.
func waitDone(t *testing.T, ctx context.Context) error {
	t.Helper()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(20 * time.Second):
		t.Fatal("lease context was never cancelled")
		return nil
	}
}

func mustAcquire(t *testing.T, l *Locker, ctx context.Context, name string) *Lease {
	t.Helper()
	ls, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	return ls.(*Lease)
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rdb.Close()
	_, err := New(nil, nil)
	configtest.Want(t, err, "redislock", "client")
	_, err = NewRueidis(nil, nil)
	configtest.Want(t, err, "redislock", "client")
	for field, c := range map[string]Config{
		"Config.TTL":          {TTL: 10 * time.Millisecond},
		"Config.SafetyMargin": {TTL: time.Second, SafetyMargin: 600 * time.Millisecond},
		"Config.RetryMin":     {RetryMin: -time.Millisecond},
		"Config.RetryMax":     {RetryMin: 50 * time.Millisecond, RetryMax: 10 * time.Millisecond},
		"Config.WaitTimeout":  {WaitTimeout: -1},
		"Config.FenceTTL":     {TTL: time.Minute, FenceTTL: time.Second},
	} {
		_, err := New(rdb, &c)
		configtest.Want(t, err, "redislock", field)
	}
	l, err := New(rdb, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l.cfg.TTL != 10*time.Second || l.cfg.Prefix != "idem:lock:" {
		t.Errorf("defaults: %+v", l.cfg)
	}
	for _, name := range []string{"", strings.Repeat("x", MaxNameLen+1), "}x"} {
		if _, err := l.TryAcquire(context.Background(), name); err == nil {
			t.Errorf("TryAcquire(%d-byte name) succeeded", len(name))
		}
	}
}

func TestKeysShareAClusterSlot(t *testing.T) {
	t.Parallel()
	l := &Locker{cfg: (&Config{}).withDefaults()}
	for _, name := range []string{"pay:1", "a}b", "{x}", "a{}"} {
		k, fk := l.keys(name)
		if tag(k) != tag(fk) {
			t.Errorf("name %q: keys %q and %q have hash tags %q and %q", name, k, fk, tag(k), tag(fk))
		}
	}
}

// tag is the Redis Cluster hash tag rule: the part between the first '{'
// and the next '}', if non-empty; else the whole key.
func tag(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 {
		return key
	}
	j := strings.IndexByte(key[i+1:], '}')
	if j <= 0 {
		return key
	}
	return key[i+1 : i+1+j]
}

// Release deletes the lock's key (the rest of acquire and release is
// lock/locktest's, in TestConformance).
func TestReleaseDeletesKey(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, nil)
	ctx := ctxT(t, 30*time.Second)
	ls := mustAcquire(t, l, ctx, "order:1")
	key, _ := l.keys("order:1")
	if n := rdb.Exists(ctx, key).Val(); n != 1 {
		t.Fatalf("lock key missing while held")
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, key).Val(); n != 0 {
		t.Errorf("lock key still exists after release")
	}
}

func TestLostLeaseExpired(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, &Config{TTL: 500 * time.Millisecond}) // slack for a loaded CI machine
	ctx := ctxT(t, 30*time.Second)
	a := mustAcquire(t, l, ctx, "gone")
	key, _ := l.keys("gone")
	rdb.Del(ctx, key)
	if cause := waitDone(t, a.Context()); !errors.Is(cause, lock.ErrExpired) || errors.Is(cause, lock.ErrNotHeld) {
		t.Fatalf("cause = %v, want ErrExpired only", cause)
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrExpired) || !lock.IsLost(err) {
		t.Fatalf("release: %v, want ErrExpired", err)
	}
}

// A private Redis restarted without persistence loses the lock and the fence
// counter. The holder's context is cancelled, its release reports ErrExpired,
// a new holder acquires, and its fence is still above the old one because a
// lost counter restarts from the server clock.
func TestRedisRestartMidLock(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	// 2s: b's lease must outlast its acquire and release on a loaded machine.
	l := lockerOn(t, rdb, &Config{TTL: 2 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	a := mustAcquire(t, l, ctx, "job")
	srv.Restart()
	if cause := waitDone(t, a.Context()); !errors.Is(cause, lock.ErrExpired) {
		t.Fatalf("cause = %v, want ErrExpired", cause)
	}
	if err := a.Release(ctx); !errors.Is(err, lock.ErrExpired) {
		t.Fatalf("release: %v, want ErrExpired", err)
	}
	b := mustAcquire(t, l, ctx, "job")
	if b.Fence() <= a.Fence() {
		t.Fatalf("fence after restart %d <= %d before", b.Fence(), a.Fence())
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFenceSurvivesCounterLossAndRaise(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, nil)
	ctx := ctxT(t, 30*time.Second)
	get := func() lock.Fence {
		ls := mustAcquire(t, l, ctx, "n")
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return ls.Fence()
	}
	f1 := get()
	_, fk := l.keys("n")
	rdb.Del(ctx, fk) // counter lost
	f2 := get()
	if f2 <= f1 {
		t.Fatalf("fence after counter loss %d <= %d", f2, f1)
	}
	want := lock.Fence(f2 + 1_000_000_000)
	if got, err := l.RaiseFence(ctx, "n", want); err != nil || got != want {
		t.Fatalf("RaiseFence = %d, %v", got, err)
	}
	if got, err := l.RaiseFence(ctx, "n", 5); err != nil || got != want {
		t.Fatalf("RaiseFence lower = %d, %v: must not lower the counter", got, err)
	}
	if f3 := get(); f3 != want+1 {
		t.Fatalf("fence after raise %d, want %d", f3, want+1)
	}
	if ttl := rdb.PTTL(ctx, fk).Val(); ttl <= 0 {
		t.Errorf("fence counter has no TTL (%v)", ttl)
	}
}

// Same-token recovery, at the script level: an attempt with a token the lock
// already holds succeeds with the same fence and a refreshed TTL; another
// token does not.
func TestSameTokenRecovers(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, &Config{TTL: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	key, fk := l.keys("x")
	run := func(token string) []int64 {
		res, err := l.c.Eval(ctx, acquireScript, []string{key, fk}, token, "5000", "0").Int64s()
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := run("tokA")
	rdb.PExpire(ctx, key, 200*time.Millisecond)
	again := run("tokA")
	if first[0] <= 0 || again[0] != first[0] {
		t.Fatalf("same token: %v then %v, want the same positive fence", first, again)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl < time.Second {
		t.Errorf("same-token attempt did not refresh the TTL: %v", ttl)
	}
	if c, _ := rdb.Get(ctx, fk).Int64(); c != first[0] {
		t.Errorf("counter %d: same-token attempt drew a new fence", c)
	}
	if other := run("tokB"); other[0] != 0 || other[1] <= 0 {
		t.Fatalf("other token: %v, want {0, pttl}", other)
	}
}

func TestWatchdogKeepsLockAlive(t *testing.T) {
	t.Parallel()
	// Renewed every second, each renewal with 1.7s to come back before the
	// local deadline: a loaded CI box (which made 600ms, 340ms of slack,
	// fail) cannot lose it, only a broken watchdog can.
	const ttl = 3 * time.Second
	l, rdb := newLocker(t, &Config{TTL: ttl})
	ctx := ctxT(t, 30*time.Second)
	ls := mustAcquire(t, l, ctx, "long")
	key, _ := l.keys("long")
	time.Sleep(3 * ttl)
	if err := ls.Context().Err(); err != nil {
		t.Fatalf("lease lost while alive: %v", context.Cause(ls.Context()))
	}
	if v := rdb.Get(ctx, key).Val(); !strings.HasPrefix(v, ls.Token()+":") {
		t.Fatalf("key value %q after three TTLs", v)
	}
	if _, err := l.TryAcquire(ctx, "long"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire: %v", err)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireWaitsHandsOverAndTimesOut(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t, &Config{TTL: 5 * time.Second})
	ctx := ctxT(t, 30*time.Second)
	a := mustAcquire(t, l, ctx, "w")

	short, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	if _, err := l.Acquire(short, "w"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire with short deadline: %v", err)
	}
	cfg := l.cfg
	cfg.WaitTimeout = 100 * time.Millisecond
	lw := build(l.c, cfg)
	if _, err := lw.Acquire(ctx, "w"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("Acquire with WaitTimeout: %v", err)
	}

	got := make(chan *Lease)
	go func() {
		b, err := l.Acquire(ctx, "w")
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- b.(*Lease)
	}()
	time.Sleep(50 * time.Millisecond)
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	b := <-got
	if b == nil {
		return
	}
	if b.Fence() <= a.Fence() {
		t.Errorf("handover fence %d after %d", b.Fence(), a.Fence())
	}
	// WaitTimeout bounds the wait, never the lease.
	lc := mustAcquire(t, lw, ctx, "w2")
	time.Sleep(200 * time.Millisecond)
	if err := lc.Context().Err(); err != nil {
		t.Errorf("lease context done after WaitTimeout: %v", context.Cause(lc.Context()))
	}
	for _, ls := range []*Lease{b, lc} {
		if err := ls.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

func TestParentCancelStopsWatchdog(t *testing.T) {
	t.Parallel()
	l, _ := newLocker(t, &Config{TTL: 2 * time.Second}) // b's lease must outlast two calls on a loaded machine
	parent, cancel := context.WithCancel(context.Background())
	ls := mustAcquire(t, l, parent, "p")
	cancel()
	if cause := waitDone(t, ls.Context()); !errors.Is(cause, context.Canceled) {
		t.Fatalf("cause %v", cause)
	}
	ctx := ctxT(t, 10*time.Second)
	b := mustAcquire(t, l, ctx, "p") // the unrenewed lock expires
	if err := ls.Release(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("release after expiry: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestAbandonedAttemptIsCleanedUp(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, nil)
	ctx := ctxT(t, 10*time.Second)
	key, fk := l.keys("ab")
	// An attempt took the lock but its caller never learned it.
	if _, err := l.c.Eval(ctx, acquireScript, []string{key, fk}, "tok", "10000", "0").Value(); err != nil {
		t.Fatal(err)
	}
	l.abandon(ctx, key, "tok")
	if rdb.Exists(ctx, key).Val() != 0 {
		t.Fatal("abandon left the lock")
	}
	if _, err := l.c.Eval(ctx, acquireScript, []string{key, fk}, "other", "10000", "0").Value(); err != nil {
		t.Fatal(err)
	}
	l.abandon(ctx, key, "tok")
	if rdb.Exists(ctx, key).Val() != 1 {
		t.Fatal("abandon deleted another owner's lock")
	}
}

// Releases racing with renewals in flight (run under -race): Release waits
// for a running renewal and no renewal starts after it.
func TestReleaseDuringRenewal(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, &Config{TTL: 60 * time.Millisecond}) // renewals every 20ms
	ctx := ctxT(t, 30*time.Second)
	for i := 0; i < 30; i++ {
		ls := mustAcquire(t, l, ctx, "r"+strconv.Itoa(i))
		time.Sleep(time.Duration(i%8) * 5 * time.Millisecond)
		if err := ls.Release(ctx); err != nil && !lock.IsLost(err) {
			t.Fatal(err)
		}
		ls.mu.Lock()
		stopped := ls.stopped
		ls.mu.Unlock()
		if !stopped {
			t.Fatal("watchdog not stopped by Release")
		}
	}
	time.Sleep(100 * time.Millisecond)
	for i := 0; i < 30; i++ {
		key, _ := l.keys("r" + strconv.Itoa(i))
		if rdb.Exists(ctx, key).Val() != 0 {
			t.Fatalf("lock r%d exists after Release", i)
		}
	}
}
