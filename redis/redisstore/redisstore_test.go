package redisstore_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild()
		return
	}
	// The unreachable-server cases make go-redis log every failed dial.
	redis.SetLogger(quietLogger{})
	// After PoolSize failed dials (a refused Redis), go-redis starts a probe
	// goroutine that sleeps a second between dials and ends at the first
	// one after its client is closed: not a leak of ours, and it may
	// outlive goleak's retries by a moment.
	os.Exit(testenv.RunOnEachRedisClient(m, "redisstore", &suiteClient, append(testenv.RueidisLeakOptions(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))...))
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// sharedClient returns a client of the shared Redis, created with
// ContextTimeoutEnabled (New refuses one without), and a key prefix of the
// test's own, whose keys are deleted when the test ends.
func sharedClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	_, prefix := redistest.RedisClient(t)
	opt, err := redis.ParseURL(testenv.Redis.DSN())
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c, prefix
}

// newStore returns a store on the shared Redis under a prefix of its own.
func newStore(t testing.TB, cfg *redisstore.Config) (*redisstore.Store, *redis.Client, string) {
	t.Helper()
	c, prefix := sharedClient(t)
	var conf redisstore.Config
	if cfg != nil {
		conf = *cfg
	}
	conf.Prefix = prefix
	return storeOn(t, c, &conf), c, prefix
}

// privateStore returns a store on a private redis-server that the test may
// kill, flush and restart.
func privateStore(t *testing.T, cfg *redisstore.Config) (*redisstore.Store, *redis.Client, *testenv.RedisServer) {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: time.Second, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return storeOn(t, c, cfg), c, srv
}

// unreachableClient points at a port nobody listens on.
func unreachableClient(t *testing.T) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  "127.0.0.1:" + strconv.Itoa(testenv.RefusedPort(t)),
		DialTimeout:           200 * time.Millisecond,
		MaxRetries:            -1,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestConformance(t *testing.T) {
	idemtest.RunStore(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			s, _, _ := newStore(t, nil)
			return s
		},
		Unreachable:  func(t *testing.T) idem.Store { return unreachableStore(t, nil) },
		NativeExpiry: true,
	})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func key(t *testing.T) idem.Key {
	return idem.MustKey("tenant-a", testenv.Name("k"))
}

func TestNewValidates(t *testing.T) {
	if _, err := redisstore.New(nil, nil); err == nil {
		t.Error("New(nil client) succeeded")
	}
	if _, err := redisstore.NewRueidis(nil, nil); err == nil {
		t.Error("NewRueidis(nil client) succeeded")
	}
	shared, _ := sharedClient(t)
	ru := redistest.Rueidis(t, shared.Options().Addr)
	if _, err := redisstore.NewRueidis(ru, &redisstore.Config{MaxResult: -1}); err == nil {
		t.Error("NewRueidis with negative MaxResult succeeded")
	}
	c := unreachableClient(t)
	if _, err := redisstore.New(c, &redisstore.Config{MaxResult: -1}); err == nil {
		t.Error("New with negative MaxResult succeeded")
	}
	if _, err := redisstore.New(c, &redisstore.Config{Prefix: strings.Repeat("p", 1000)}); err == nil {
		t.Error("New with a 1000-byte prefix succeeded")
	}
	s, err := redisstore.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	k := idem.MustKey("s", "id")
	if got, want := s.Key(k), "idem:"+k.Digest().String(); got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
}

// TestRecordLayout checks what lands in Redis: only the digest in the key,
// a version-1 hash, a TTL at the record's expiry that Complete and Release
// keep.
func TestRecordLayout(t *testing.T) {
	s, c, prefix := newStore(t, nil)
	ctx := ctxT(t)
	k := idem.MustKey("tenant-secret", "order-4711-"+testenv.Name("x"))
	retention := time.Hour
	owner, err := s.Begin(ctx, idem.BeginRequest{Key: k, Fingerprint: idem.FingerprintOf([]byte("a")), Lease: time.Minute, Retention: retention})
	if err != nil || owner.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", owner, err)
	}
	rk := prefix + k.Digest().String()
	if s.Key(k) != rk {
		t.Fatalf("Key = %q, want %q", s.Key(k), rk)
	}
	h, err := c.HGetAll(ctx, rk).Result()
	if err != nil {
		t.Fatal(err)
	}
	if h["v"] != "1" || h["s"] != "p" || h["tok"] != string(owner.Owner.Token[:]) || h["f"] != strconv.FormatUint(owner.Owner.Fence, 10) ||
		h["tk"] != "0" || h["m"] != "" {
		t.Errorf("in-progress hash = %q", h)
	}
	if err := s.MarkStarted(ctx, owner.Owner); err != nil {
		t.Fatal(err)
	}
	if m, _ := c.HGet(ctx, rk, "m").Result(); m != "1" {
		t.Errorf("m after MarkStarted = %q, want 1", m)
	}
	for f, v := range h {
		if strings.Contains(v, "order-4711") || strings.Contains(v, "tenant-secret") {
			t.Errorf("field %s holds the raw key or scope", f)
		}
	}
	ttl := func() time.Duration {
		d, err := c.PTTL(ctx, rk).Result()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	first := ttl()
	if first <= 0 || first > retention+time.Millisecond { // the expiry is rounded up to a ms
		t.Fatalf("PTTL after Begin = %v, want in (0, %v]", first, retention)
	}
	if err := s.Complete(ctx, owner.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	if d := ttl(); d <= 0 || d > first {
		t.Errorf("PTTL after Complete = %v, want kept (≤ %v)", d, first)
	}
	if h, _ := c.HGetAll(ctx, rk).Result(); h["s"] != "c" || h["res"] != "r" {
		t.Errorf("completed hash = %q", h)
	}
	// A repeated Complete keeps the first result.
	if err := s.Complete(ctx, owner.Owner, []byte("other")); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.Begin(ctx, idem.BeginRequest{Key: k, Fingerprint: idem.FingerprintOf([]byte("a"))}); string(r.Result) != "r" {
		t.Errorf("replay after a second Complete = %q, want the first result", r.Result)
	}

	// Release keeps the TTL too.
	k2 := key(t)
	o2, err := s.Begin(ctx, idem.BeginRequest{Key: k2, Lease: time.Minute, Retention: retention})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, o2.Owner); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.PTTL(ctx, s.Key(k2)).Result(); d <= 0 || d > retention+time.Millisecond {
		t.Errorf("PTTL after Release = %v", d)
	}
	rec, err := s.Get(ctx, k2)
	if err != nil || rec.State != idem.StateReleased || !rec.LeaseUntil.IsZero() {
		t.Errorf("released record = %+v, %v", rec, err)
	}
}

// TestExtendPushesExpiry: a lease longer than the retention keeps the
// record (and the key's TTL) alive until the lease ends.
func TestExtendPushesExpiry(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	k := key(t)
	// Extend must come within the lease, even on a loaded machine: 2s.
	cl, err := s.Begin(ctx, idem.BeginRequest{Key: k, Lease: 2 * time.Second, Retention: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Extend(ctx, cl.Owner, time.Hour); err != nil {
		t.Fatal(err)
	}
	if d, _ := c.PTTL(ctx, s.Key(k)).Result(); d < 59*time.Minute {
		t.Errorf("PTTL after Extend(1h) = %v", d)
	}
	rec, err := s.Get(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if rec.ExpiresAt.Before(rec.LeaseUntil) || rec.LeaseUntil.Sub(rec.CreatedAt) < 59*time.Minute {
		t.Errorf("record after Extend = %+v", rec)
	}
	if err := s.Extend(ctx, cl.Owner, 0); err == nil {
		t.Error("Extend(0) succeeded")
	}
}

func TestMaxResult(t *testing.T) {
	s, _, _ := newStore(t, &redisstore.Config{MaxResult: 10})
	ctx := ctxT(t)
	cl, err := s.Begin(ctx, idem.BeginRequest{Key: key(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, cl.Owner, make([]byte, 11)); !errors.Is(err, idem.ErrResultTooLarge) {
		t.Errorf("Complete(11 bytes) = %v, want ErrResultTooLarge", err)
	}
	if err := s.Complete(ctx, cl.Owner, make([]byte, 10)); err != nil {
		t.Errorf("Complete(10 bytes) = %v", err)
	}
}

// TestUnknownVersion: a record written by a newer encoding is never
// misread: every operation on it fails, none overwrites it.
func TestUnknownVersion(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	k := key(t)
	if err := c.HSet(ctx, s.Key(k), "v", "2", "s", "p").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Begin(ctx, idem.BeginRequest{Key: k})
	if !errors.Is(err, redisstore.ErrVersion) || !idem.IsUnavailable(err) {
		t.Errorf("Begin on a v2 record = %v, want ErrVersion (unavailable)", err)
	}
	if _, err := s.Get(ctx, k); !errors.Is(err, redisstore.ErrVersion) {
		t.Errorf("Get on a v2 record = %v, want ErrVersion", err)
	}
	o := idem.Owner{Key: k, Token: idem.NewToken()}
	if err := s.Complete(ctx, o, nil); !errors.Is(err, redisstore.ErrVersion) {
		t.Errorf("Complete on a v2 record = %v, want ErrVersion", err)
	}
	if v, _ := c.HGet(ctx, s.Key(k), "v").Result(); v != "2" {
		t.Errorf("v2 record overwritten: v=%q", v)
	}
}

// TestPurgeOnlyLogicallyExpired: records whose TTL was removed by hand are
// purged by their logical expiry; live ones never.
func TestPurgeOnlyLogicallyExpired(t *testing.T) {
	s, c, _ := newStore(t, nil)
	ctx := ctxT(t)
	var dead, live []idem.Key
	past := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMicro(), 10)
	for i := 0; i < 10; i++ {
		k := key(t)
		if _, err := s.Begin(ctx, idem.BeginRequest{Key: k, Lease: time.Minute, Retention: time.Hour}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			live = append(live, k)
		} else {
			// Logically expired a minute ago, but its TTL was removed (an
			// operator's PERSIST, a restore without TTLs).
			dead = append(dead, k)
			if err := c.HSet(ctx, s.Key(k), "x", past).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Persist(ctx, s.Key(k)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// A foreign key under the prefix is left alone.
	foreign := s.Key(key(t))
	if err := c.Set(ctx, foreign+"x", "not ours", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Purge(ctx, time.Hour, 3); err != nil || n != 0 {
		t.Fatalf("Purge(grace 1h) = %d, %v; want 0", n, err)
	}
	n, err := s.Purge(ctx, 0, 3)
	if err != nil || n != int64(len(dead)) {
		t.Fatalf("Purge = %d, %v; want %d", n, err, len(dead))
	}
	for _, k := range dead {
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("expired record %v: %v", k, err)
		}
	}
	for _, k := range live {
		if _, err := s.Get(ctx, k); err != nil {
			t.Errorf("live record %v: %v", k, err)
		}
	}
	if v, _ := c.Get(ctx, foreign+"x").Result(); v != "not ours" {
		t.Errorf("foreign key touched")
	}
}

// TestCheckMissingDB: a client that selects a database the server does
// not have is reported as such, not as an eviction policy.
func TestCheckMissingDB(t *testing.T) { // not parallel: it waits for rueidis's goroutines to end
	_, c, _ := newStore(t, nil)
	opt := *c.Options()
	opt.DB = 99
	var err error
	if suiteClient == testenv.RueidisKind {
		// rueidis selects the database when the client is made; the
		// failed client leaves a retry timer that ends by itself.
		before := goleak.IgnoreCurrent()
		_, err = openStore(suiteClient, &opt, nil)
		t.Cleanup(func() { _ = goleak.Find(append(testenv.RueidisLeakOptions(), before)...) }) // waits while it runs
	} else {
		bad := redis.NewClient(&opt)
		t.Cleanup(func() { bad.Close() })
		err = storeOn(t, bad, nil).Check(ctxT(t))
	}
	if err == nil || !strings.Contains(err.Error(), "DB index is out of range") || errors.Is(err, redisstore.ErrEvictionPolicy) {
		t.Fatalf("Check on DB 99 = %v, want DB index is out of range", err)
	}
}

// TestPurgeNegativeGrace: a negative grace is refused, as memstore and
// sqlstore refuse it.
func TestPurgeNegativeGrace(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t, nil)
	if _, err := s.Purge(ctxT(t), -time.Second, 100); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("Purge(grace -1s) = %v, want an error", err)
	}
}

func TestCheck(t *testing.T) {
	s, c, srv := privateStore(t, nil)
	ctx := ctxT(t)
	admin := func(args ...any) {
		t.Helper()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check on noeviction = %v", err)
	}
	for _, policy := range []string{"allkeys-lru", "volatile-ttl", "volatile-lru", "allkeys-random"} {
		admin("CONFIG", "SET", "maxmemory-policy", policy)
		err := s.Check(ctx)
		if !errors.Is(err, redisstore.ErrEvictionPolicy) || !strings.Contains(err.Error(), policy) {
			t.Errorf("Check on %s = %v, want ErrEvictionPolicy naming it", policy, err)
		}
	}

	// AllowEviction: a warning, not an error.
	var logs bytes.Buffer
	lenient := storeOn(t, c, &redisstore.Config{AllowEviction: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err := lenient.Check(ctx); err != nil {
		t.Errorf("Check with AllowEviction = %v", err)
	}
	if !strings.Contains(logs.String(), "allkeys-random") || !strings.Contains(logs.String(), "WARN") {
		t.Errorf("no warning logged: %q", logs.String())
	}

	// A managed server that refuses CONFIG: INFO tells the policy.
	admin("ACL", "SETUSER", "noconfig", "on", "nopass", "~*", "+@all", "-config")
	admin("ACL", "SETUSER", "blind", "on", "nopass", "~*", "+@all", "-config", "-info")
	limited := func(user string, cfg *redisstore.Config) *redisstore.Store {
		lc := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: user, Password: "unused", MaxRetries: -1, ContextTimeoutEnabled: true}) // nopass users take any password
		t.Cleanup(func() { lc.Close() })
		return storeOn(t, lc, cfg)
	}
	if err := limited("noconfig", nil).Check(ctx); !errors.Is(err, redisstore.ErrEvictionPolicy) {
		t.Errorf("Check without CONFIG on allkeys-random = %v, want ErrEvictionPolicy", err)
	}
	admin("CONFIG", "SET", "maxmemory-policy", "noeviction")
	if err := limited("noconfig", nil).Check(ctx); err != nil {
		t.Errorf("Check without CONFIG on noeviction = %v", err)
	}
	// Neither CONFIG nor INFO: unverified is refused, or warned with AllowEviction.
	if err := limited("blind", nil).Check(ctx); !errors.Is(err, redisstore.ErrEvictionPolicy) || idem.IsUnavailable(err) {
		t.Errorf("Check without CONFIG and INFO = %v, want ErrEvictionPolicy", err)
	}
	if err := limited("blind", &redisstore.Config{AllowEviction: true, Logger: slog.New(slog.DiscardHandler)}).Check(ctx); err != nil {
		t.Errorf("Check without CONFIG and INFO, AllowEviction = %v", err)
	}

	// A server that does not answer is unavailable, whatever AllowEviction says.
	down := unreachableStore(t, &redisstore.Config{AllowEviction: true})
	if err := down.Check(ctx); !idem.IsUnavailable(err) {
		t.Errorf("Check on a closed port = %v, want IsUnavailable", err)
	}
}

// TestServerRestart: while Redis is down every operation is unavailable;
// after a restart (empty, no persistence) the in-flight owner has lost its
// claim, and the key starts over with a larger fence.
func TestServerRestart(t *testing.T) {
	s, _, srv := privateStore(t, nil)
	ctx := ctxT(t)
	k := key(t)
	req := idem.BeginRequest{Key: k, Lease: time.Minute}
	cl, err := s.Begin(ctx, req)
	if err != nil || cl.Outcome != idem.Acquired {
		t.Fatalf("Begin = %+v, %v", cl, err)
	}
	srv.Kill()
	if _, err := s.Begin(ctx, req); !idem.IsUnavailable(err) {
		t.Errorf("Begin while down = %v, want IsUnavailable", err)
	}
	if err := s.Complete(ctx, cl.Owner, []byte("x")); !idem.IsUnavailable(err) {
		t.Errorf("Complete while down = %v, want IsUnavailable", err)
	}
	if err := s.Extend(ctx, cl.Owner, time.Minute); !idem.IsUnavailable(err) {
		t.Errorf("Extend while down = %v, want IsUnavailable", err)
	}
	if _, err := s.Get(ctx, k); !idem.IsUnavailable(err) {
		t.Errorf("Get while down = %v, want IsUnavailable", err)
	}
	srv.Start()
	if err := s.Complete(ctx, cl.Owner, []byte("x")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("Complete after restart = %v, want ErrLeaseLost", err)
	}
	again, err := s.Begin(ctx, req)
	if err != nil || again.Outcome != idem.Acquired || again.Owner.Fence <= cl.Owner.Fence {
		t.Errorf("Begin after restart = %+v, %v; want Acquired with fence > %d", again, err, cl.Owner.Fence)
	}
}

// TestScriptCacheFlushed: SCRIPT FLUSH (or a failover to a replica that
// never saw the scripts) costs one EVAL, not an error.
func TestScriptCacheFlushed(t *testing.T) {
	s, c, _ := privateStore(t, nil)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: key(t)}
	cl, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, cl.Owner, []byte("ok")); err != nil {
		t.Fatalf("Complete after SCRIPT FLUSH: %v", err)
	}
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Begin(ctx, req); err != nil || string(r.Result) != "ok" {
		t.Fatalf("Begin after SCRIPT FLUSH = %+v, %v", r, err)
	}
}

const childEnv = "IDEM_REDISSTORE_CRASH_CHILD"

// crashChild claims a key and reports its owner, then hangs until killed.
func crashChild() {
	args := strings.Split(os.Getenv(childEnv), ",") // redis URL, prefix, key id
	opt, err := redis.ParseURL(args[0])
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	s, err := openStore(os.Getenv(childClientEnv), opt, &redisstore.Config{Prefix: args[1]})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	cl, err := s.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("crash", args[2]), Lease: 300 * time.Millisecond, Retention: time.Hour})
	if err != nil || cl.Outcome != idem.Acquired {
		fmt.Println("ERR", cl.Outcome, err)
		os.Exit(2)
	}
	fmt.Printf("ACQUIRED %d %s\n", cl.Owner.Fence, cl.Owner.Token)
	select {} // the "work" never ends: the parent kills us with SIGKILL
}

// TestCrashedHolderIsTakenOver kills a real process that holds a claim:
// after its lease a retry takes over with a larger fence, and the dead
// holder's token is refused.
func TestCrashedHolderIsTakenOver(t *testing.T) {
	s, _, prefix := newStore(t, nil)
	ctx := ctxT(t)
	id := testenv.Name("crash")
	line := testenv.KillAtLine(t, "ACQUIRED ", time.Minute,
		[]string{childEnv + "=" + testenv.Redis.DSN() + "," + prefix + "," + id, childClientEnv + "=" + suiteClient}, "-test.run=^$")
	var fence uint64
	var tokHex string
	if _, err := fmt.Sscanf(line, "%d %s", &fence, &tokHex); err != nil {
		t.Fatalf("child said %q", line)
	}
	var dead idem.Owner
	dead.Key = idem.MustKey("crash", id)
	dead.Fence = fence
	if b, err := hex.DecodeString(tokHex); err != nil || copy(dead.Token[:], b) != 16 {
		t.Fatalf("child token %q", tokHex)
	}

	req := idem.BeginRequest{Key: dead.Key, Lease: time.Minute, Retention: time.Hour}
	deadline := time.Now().Add(15 * time.Second)
	var (
		cl  idem.Claim
		err error
	)
	for {
		cl, err = s.Begin(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if cl.Outcome == idem.Acquired {
			break
		}
		if cl.Outcome != idem.InFlight || time.Now().After(deadline) {
			t.Fatalf("Begin after the holder died = %v", cl.Outcome)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !cl.Takeover || cl.Owner.Fence <= fence {
		t.Errorf("claim after crash = %+v, want takeover with fence > %d", cl, fence)
	}
	if err := s.Complete(ctx, dead, []byte("zombie")); !errors.Is(err, idem.ErrLeaseLost) {
		t.Errorf("dead holder's Complete = %v, want ErrLeaseLost", err)
	}
	if err := s.Complete(ctx, cl.Owner, []byte("ok")); err != nil {
		t.Fatal(err)
	}
}

func TestStepConformance(t *testing.T) {
	idemtest.RunSteps(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			s, _, _ := newStore(t, nil)
			return s
		},
	})
}
