package redisinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisinbox"
)

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

func TestMain(m *testing.M) {
	redis.SetLogger(quietLogger{}) // the outage test makes go-redis log every failed dial
	goleak.VerifyTestMain(m, testenv.RueidisLeakOptions()...)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func TestNewValidates(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	for field, c := range map[string]*redisinbox.Config{
		"Config.ClaimTTL": {ClaimTTL: time.Microsecond},
		"Config.DoneTTL":  {DoneTTL: -time.Second},
		"Config.Timeout":  {Timeout: -1},
		"Config.Prefix":   {Prefix: "a b"},
	} {
		_, err := redisinbox.New(rdb, c)
		configtest.Want(t, err, "redisinbox", field)
	}
	_, err := redisinbox.New(nil, nil)
	configtest.Want(t, err, "redisinbox", "client")
	_, err = redisinbox.NewRueidis(nil, nil)
	configtest.Want(t, err, "redisinbox", "client")
}

// TestScripts checks each Lua decision against a real Redis, on each client.
func TestScripts(t *testing.T) {
	forEachClient(t, func(t *testing.T, kind string) {
		rdb, prefix := redistest.RedisClient(t)
		checkScripts(t, fastOn(t, kind, rdb, &redisinbox.Config{Prefix: prefix, ClaimTTL: time.Minute, Timeout: 10 * time.Second}), rdb, prefix)
	})
}

// checkScripts checks each Lua decision of fp, whose keys are under prefix;
// rdb inspects them.
func checkScripts(t *testing.T, fp *redisinbox.FastPath, rdb redis.Cmdable, prefix string) {
	t.Helper()
	ctx := ctxT(t)
	st, tok, err := fp.Claim(ctx, "k")
	if err != nil || st != inbox.FastClaimed || tok == "" {
		t.Fatalf("first claim: %v %q %v", st, tok, err)
	}
	if st, _, err := fp.Claim(ctx, "k"); err != nil || st != inbox.FastBusy {
		t.Fatalf("second claim: %v %v", st, err)
	}
	// A foreign release or a token-less completion leaves the live claim alone.
	if err := fp.Release(ctx, "k", "someone-else"); err != nil {
		t.Fatal(err)
	}
	if err := fp.Complete(ctx, "k", ""); err != nil {
		t.Fatal(err)
	}
	if v := rdb.Get(ctx, prefix+"k").Val(); v != "processing:"+tok {
		t.Fatalf("claim overwritten: %q", v)
	}
	// The owner's release frees it.
	if err := fp.Release(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if n := rdb.Exists(ctx, prefix+"k").Val(); n != 0 {
		t.Fatal("release by the owner did not delete")
	}
	// Claim, complete: done, with the done TTL.
	_, tok, _ = fp.Claim(ctx, "k")
	if err := fp.Complete(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if st, _, err := fp.Claim(ctx, "k"); err != nil || st != inbox.FastDone {
		t.Fatalf("after complete: %v %v", st, err)
	}
	if ttl := rdb.PTTL(ctx, prefix+"k").Val(); ttl < time.Hour {
		t.Fatalf("done TTL %v, want about 24h", ttl)
	}
	// Release never deletes "done".
	if err := fp.Release(ctx, "k", tok); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := fp.Claim(ctx, "k"); st != inbox.FastDone {
		t.Fatal("release deleted a done entry")
	}
	// Token-less completion fills an empty key (lost or never claimed).
	if err := fp.Complete(ctx, "k2", ""); err != nil {
		t.Fatal(err)
	}
	if st, _, _ := fp.Claim(ctx, "k2"); st != inbox.FastDone {
		t.Fatal("token-less complete did not fill an empty key")
	}
}

func TestClaimExpires(t *testing.T) {
	forEachClient(t, func(t *testing.T, kind string) {
		rdb, prefix := redistest.RedisClient(t)
		fp := fastOn(t, kind, rdb, &redisinbox.Config{Prefix: prefix, ClaimTTL: 100 * time.Millisecond})
		ctx := ctxT(t)
		if st, _, _ := fp.Claim(ctx, "k"); st != inbox.FastClaimed {
			t.Fatal(st)
		}
		for { // poll: a dead holder's claim goes away on its own
			st, _, err := fp.Claim(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if st == inbox.FastClaimed {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

type fixture struct {
	db    *sql.DB
	ib    *inbox.Inbox
	table string
}

func newFixture(t *testing.T, fast inbox.FastPath) *fixture {
	return newFixtureConfig(t, &inbox.Config{FastPath: fast})
}

func newFixtureConfig(t *testing.T, cfg *inbox.Config) *fixture {
	t.Helper()
	db, _ := testenv.PostgresDB(t)
	db.SetMaxOpenConns(12)
	table := testenv.Name("inbox")
	c := *cfg
	c.Dialect, c.Table = inbox.Postgres, table
	ib, err := inbox.New(db, &c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+table+`_effects (message_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &fixture{db: db, ib: ib, table: table}
}

func (f *fixture) effect(id string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, id)
		return err
	}
}

func (f *fixture) effects(t *testing.T) (total, distinct int) {
	t.Helper()
	if err := f.db.QueryRowContext(ctxT(t), `SELECT COUNT(*), COUNT(DISTINCT message_id) FROM `+f.table+`_effects`).Scan(&total, &distinct); err != nil {
		t.Fatal(err)
	}
	return total, distinct
}

func TestConcurrentDuplicatesWithFastPath(t *testing.T) {
	forEachClient(t, func(t *testing.T, kind string) {
		rdb, prefix := redistest.RedisClient(t)
		// A generous timeout: on a loaded machine 100 concurrent calls
		// through one pool can exceed 200ms, the breaker then rightly skips
		// Redis, and the duplicates would (correctly) go to the database.
		checkConcurrentDuplicates(t, fastOn(t, kind, rdb, &redisinbox.Config{Prefix: prefix, Timeout: 10 * time.Second}))
	})
}

// checkConcurrentDuplicates: 100 concurrent deliveries of one message apply
// it once, and later duplicates are answered by fp without the database.
func checkConcurrentDuplicates(t *testing.T, fp *redisinbox.FastPath) {
	t.Helper()
	f := newFixture(t, fp)
	ctx := ctxT(t)
	var processed atomic.Int32
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			out, err := f.ib.Process(ctx, "c", "same", f.effect("same"))
			if err != nil {
				t.Error(err)
			}
			if out == inbox.Processed {
				processed.Add(1)
			}
		})
	}
	wg.Wait()
	if total, _ := f.effects(t); total != 1 || processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed; want 1, 1", total, processed.Load())
	}
	// Later duplicates are absorbed by Redis without touching the database.
	before := f.ib.Stats().FastPathDuplicates
	for range 10 {
		if out, err := f.ib.Process(ctx, "c", "same", f.effect("same")); err != nil || out != inbox.Duplicate {
			t.Fatal(out, err)
		}
	}
	if got := f.ib.Stats().FastPathDuplicates - before; got != 10 {
		t.Fatalf("%d of 10 duplicates answered by Redis", got)
	}
}

// TestRedisLossMidRun: the fast path's Redis is flushed, then killed, then
// restarted empty while workers consume a stream with duplicates, on each
// client. The database stays the judge: no error reaches the consumer, no
// message is lost and none is applied twice.
func TestRedisLossMidRun(t *testing.T) {
	forEachClient(t, testRedisLossMidRun)
}

func testRedisLossMidRun(t *testing.T, kind string) {
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	fp := fastOn(t, kind, rdb, &redisinbox.Config{Timeout: 300 * time.Millisecond})
	f := newFixtureConfig(t, &inbox.Config{FastPath: fp, FastPathBackoff: 20 * time.Millisecond})
	ctx := ctxT(t)
	const unique, total = 1400, 2000
	deliveries := make([]string, 0, total)
	for i := range unique {
		deliveries = append(deliveries, fmt.Sprint("m", i))
	}
	for len(deliveries) < total {
		deliveries = append(deliveries, fmt.Sprint("m", rand.IntN(unique)))
	}
	rand.Shuffle(total, func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })
	queue := make(chan string, total)
	for _, d := range deliveries {
		queue <- d
	}
	close(queue)
	var done atomic.Int64
	var phase sync.Mutex
	events := map[int64]func(){
		total / 5:     func() { rdb.FlushAll(context.Background()) },
		total * 2 / 5: srv.Kill,
		total * 3 / 5: srv.Start,
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range queue {
				out, err := f.ib.Process(ctx, "c", id, f.effect(id))
				if err != nil || (out != inbox.Processed && out != inbox.Duplicate) {
					t.Errorf("%s: %v, %v", id, out, err)
				}
				if ev, ok := events[done.Add(1)]; ok {
					phase.Lock()
					ev()
					phase.Unlock()
				}
			}
		})
	}
	wg.Wait()
	totalEffects, distinct := f.effects(t)
	if totalEffects != unique || distinct != unique {
		t.Fatalf("effects %d (distinct %d), want %d", totalEffects, distinct, unique)
	}
	s := f.ib.Stats()
	if s.FastPathErrors == 0 {
		t.Fatal("Redis was killed but no fast-path error was seen: the test did not exercise the outage")
	}
	t.Logf("stats %+v", s)
	// The restarted Redis is used again: a duplicate is answered by it.
	// (This also ends the run the right way round: go-redis counts failed
	// dials, and after PoolSize of them it fails every dial at once and
	// starts a goroutine that re-dials once a second until one succeeds.
	// Only that goroutine's success lets a command through again, so once
	// Redis answers here it has returned — closing the client earlier left
	// it sleeping past the end of the tests, and goleak failed the run.)
	waitFastPathAnswers(t, f, "m0")
}

// waitFastPathAnswers processes id (already committed) until the fast path
// answers it as a duplicate.
func waitFastPathAnswers(t *testing.T, f *fixture, id string) {
	t.Helper()
	ctx := ctxT(t)
	for before := f.ib.Stats().FastPathDuplicates; f.ib.Stats().FastPathDuplicates == before; {
		if out, err := f.ib.Process(ctx, "c", id, f.effect(id)); err != nil || out != inbox.Duplicate {
			t.Fatalf("%s after recovery: %v, %v", id, out, err)
		}
		if ctx.Err() != nil {
			t.Fatal("the fast path never came back after Redis returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingFast counts the calls that reach Redis.
type countingFast struct {
	inbox.FastPath
	calls atomic.Int64
}

func (c *countingFast) Claim(ctx context.Context, key string) (inbox.FastState, string, error) {
	c.calls.Add(1)
	return c.FastPath.Claim(ctx, key)
}

func (c *countingFast) Complete(ctx context.Context, key, token string) error {
	c.calls.Add(1)
	return c.FastPath.Complete(ctx, key, token)
}

func (c *countingFast) Release(ctx context.Context, key, token string) error {
	c.calls.Add(1)
	return c.FastPath.Release(ctx, key, token)
}

// proxiedRedis returns a client of the shared Redis through a fault proxy,
// and a key prefix of the test's own (its keys are deleted at the end, over
// a direct connection).
func proxiedRedis(t testing.TB, honourDeadlines bool, tune ...func(*redis.Options)) (*redis.Client, *testenv.FaultProxy, string) {
	t.Helper()
	direct, prefix := redistest.RedisClient(t)
	p := testenv.NewFaultProxy(t, direct.Options().Addr)
	// Options from the URL again, not a copy of direct's: those carry a
	// Dialer bound to the server's own address.
	opt, err := redis.ParseURL(testenv.Redirect(testenv.Redis.Need(t), p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	opt.MaxRetries = -1
	opt.ContextTimeoutEnabled = honourDeadlines
	if !honourDeadlines {
		// go-redis would wait for ever on a black-holed socket: only the
		// FastPath's own bound can end a call.
		opt.ReadTimeout, opt.WriteTimeout = -1, -1
	}
	for _, f := range tune {
		f(opt)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	if err := rdb.Ping(ctxT(t)).Err(); err != nil {
		testenv.Unavailable(t, "Redis", err)
	}
	return rdb, p, prefix
}

// TestBlackHoledRedis: Redis stops answering (a black hole: connections stay
// open, nothing comes back) while 8 workers consume 300 messages. Every
// message is processed exactly once with no error, and the breaker keeps
// Redis out of the path: the calls that reach Redis during the outage are
// those already under way when it began (at most one per worker, plus its
// post-commit write), not one per message. It runs with a client that
// honours context deadlines and with one that ignores them and would wait
// for ever (ReadTimeout -1): the FastPath bounds that one itself; and with
// rueidis.
func TestBlackHoledRedis(t *testing.T) {
	for _, v := range boundedClients {
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			rdb, proxy, prefix := proxiedRedis(t, v.honour)
			// A timeout no healthy call exceeds even on a loaded machine (a
			// slow call in the healthy phase would open the breaker early).
			fp := fastOn(t, v.kind, rdb, &redisinbox.Config{Prefix: prefix, Timeout: 2 * time.Second})
			counted := &countingFast{FastPath: fp}
			// The breaker never reopens during the test: every call after the
			// first failure would be a violation.
			f := newFixtureConfig(t, &inbox.Config{FastPath: counted, FastPathBackoff: time.Hour, Logger: quietSlog()})
			ctx := ctxT(t)
			// Healthy first: some messages go through Redis.
			for i := range 20 {
				id := fmt.Sprint("warm", i)
				if _, err := f.ib.Process(ctx, "c", id, f.effect(id)); err != nil {
					t.Fatal(err)
				}
			}
			if s := f.ib.Stats(); s.FastPathErrors != 0 {
				t.Fatalf("fast path failing before the outage: %+v", s)
			}

			proxy.Set(testenv.BlackHole)
			before := counted.calls.Load()
			const workers, n = 8, 300
			queue := make(chan string, n)
			for i := range n {
				queue <- fmt.Sprint("m", i)
			}
			close(queue)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for id := range queue {
						out, err := f.ib.Process(ctx, "c", id, f.effect(id))
						if err != nil || out != inbox.Processed {
							t.Errorf("%s during the Redis outage: %v, %v", id, out, err)
						}
					}
				})
			}
			wg.Wait()
			during := counted.calls.Load() - before
			if total, distinct := f.effects(t); total != n+20 || distinct != n+20 {
				t.Fatalf("effects %d (distinct %d), want %d", total, distinct, n+20)
			}
			if max := int64(2 * workers); during > max {
				t.Fatalf("%d fast-path calls reached the black-holed Redis for %d messages; the breaker allows at most %d", during, n, max)
			}
			s := f.ib.Stats()
			if s.FastPathErrors == 0 || s.FastPathSkipped == 0 {
				t.Fatalf("the outage was not seen: %+v", s)
			}
			t.Logf("%d calls reached Redis during the outage; stats %+v", during, s)
		})
	}
}

// TestBreakerProbesAndRecovers: with a short FastPathBackoff, the inbox
// probes the black-holed Redis now and then, and uses it again once it
// answers, on each client.
func TestBreakerProbesAndRecovers(t *testing.T) {
	t.Parallel()
	forEachClient(t, testBreakerProbesAndRecovers)
}

func testBreakerProbesAndRecovers(t *testing.T, kind string) {
	rdb, proxy, prefix := proxiedRedis(t, true)
	fp := fastOn(t, kind, rdb, &redisinbox.Config{Prefix: prefix, Timeout: 50 * time.Millisecond})
	f := newFixtureConfig(t, &inbox.Config{FastPath: fp, FastPathBackoff: 20 * time.Millisecond, Logger: quietSlog()})
	ctx := ctxT(t)
	if out, err := f.ib.Process(ctx, "c", "m0", f.effect("m0")); err != nil || out != inbox.Processed {
		t.Fatal(out, err)
	}
	proxy.Set(testenv.BlackHole)
	for i := range 30 {
		id := fmt.Sprint("m", i+1)
		if out, err := f.ib.Process(ctx, "c", id, f.effect(id)); err != nil || out != inbox.Processed {
			t.Fatal(id, out, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if s := f.ib.Stats(); s.FastPathErrors < 2 {
		t.Fatalf("the breaker never probed the black-holed Redis again: %+v", s)
	}
	proxy.Set(testenv.Pass)
	waitFastPathAnswers(t, f, "m0")
}

// TestCallsEndAtTimeout: a direct call through a black hole returns at the
// FastPath's Timeout with a deadline error: on a go-redis client that would
// wait for ever (the FastPath bounds it), and on rueidis (which honours the
// deadline itself).
func TestCallsEndAtTimeout(t *testing.T) {
	for _, v := range boundedClients {
		if v.kind == goRedisClient && v.honour {
			continue // go-redis reports its own i/o timeout, not the context's
		}
		t.Run(v.name, func(t *testing.T) {
			t.Parallel()
			rdb, proxy, prefix := proxiedRedis(t, v.honour)
			fp := fastOn(t, v.kind, rdb, &redisinbox.Config{Prefix: prefix, Timeout: 50 * time.Millisecond})
			proxy.Set(testenv.BlackHole)
			for _, call := range []func() error{
				func() error { _, _, err := fp.Claim(context.Background(), "k"); return err },
				func() error { return fp.Complete(context.Background(), "k", "") },
				func() error { return fp.Release(context.Background(), "k", "t") },
			} {
				if err := call(); !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("call through a black hole: %v, want a deadline error", err)
				}
			}
		})
	}
}

// TestHungCallsAreCapped: through a black hole, a deadline-ignoring client's
// calls are abandoned at the timeout and stay hung on their sockets; once 64
// are, calls fail at once with ErrTooManyHung instead of leaving one more
// goroutine behind. (go-redis bounds some of them itself: a call still
// waiting for a pooled connection or a dial honours the context and ends.
// So the test keeps calling until the cap engages; without the cap it never
// would, every call would be one more hung goroutine or a timeout.) Only a
// go-redis client without ContextTimeoutEnabled has such calls: rueidis and
// a deadline-honouring go-redis client end every call at the timeout.
func TestHungCallsAreCapped(t *testing.T) {
	t.Parallel()
	rdb, proxy, prefix := proxiedRedis(t, false, func(o *redis.Options) { o.PoolSize = 100 })
	fp, err := redisinbox.New(rdb, &redisinbox.Config{Prefix: prefix, Timeout: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	proxy.Set(testenv.BlackHole)
	for i := range 2000 {
		_, _, err := fp.Claim(context.Background(), "k")
		switch {
		case errors.Is(err, redisinbox.ErrTooManyHung):
			if i < 64 {
				t.Fatalf("refused after %d calls, before 64 were abandoned", i)
			}
			return
		case !errors.Is(err, context.DeadlineExceeded):
			t.Fatalf("call %d through a black hole: %v", i, err)
		}
	}
	t.Fatal("2000 calls through a black hole and the cap of 64 hung calls never engaged")
}

// TestNamespaceSeparatesDatabases: two databases (PostgreSQL schemas, and
// MariaDB databases) hold a dedup table of the same name, and their inboxes
// share one Redis and one prefix. A message processed in the first is new to
// the second. On each client.
func TestNamespaceSeparatesDatabases(t *testing.T) {
	forEachClient(t, testNamespaceSeparatesDatabases)
}

func testNamespaceSeparatesDatabases(t *testing.T, kind string) {
	open := map[string]func(t *testing.T) (*sql.DB, inbox.Dialect){
		"postgres": func(t *testing.T) (*sql.DB, inbox.Dialect) { db, _ := testenv.PostgresDB(t); return db, inbox.Postgres },
		"mysql":    func(t *testing.T) (*sql.DB, inbox.Dialect) { db, _ := testenv.MySQLDB(t); return db, inbox.MySQL },
	}
	for name, open := range open {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := redistest.RedisClient(t)
			// No faults here: a generous timeout, so that a loaded machine
			// cannot open the breaker and hide what the test looks at.
			fp := fastOn(t, kind, rdb, &redisinbox.Config{Prefix: prefix, Timeout: 10 * time.Second})
			ctx := ctxT(t)
			var applied [2]int
			for tenant := range 2 {
				db, dialect := open(t)
				ib, err := inbox.New(db, &inbox.Config{Dialect: dialect, Table: "orders_inbox", FastPath: fp})
				if err != nil {
					t.Fatal(err)
				}
				if err := ib.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				for range 2 {
					out, err := ib.Process(ctx, "billing", "evt-1", func(context.Context, *sql.Tx) error {
						applied[tenant]++
						return nil
					})
					if err != nil {
						t.Fatal(err)
					}
					if s := ib.Stats(); out == inbox.Duplicate && s.FastPathDuplicates != 1 {
						t.Fatalf("tenant %d: duplicate not answered by Redis: %+v", tenant, s)
					}
				}
			}
			if applied != [2]int{1, 1} {
				t.Fatalf("handler runs per database %v, want [1 1]: the second database's message was skipped", applied)
			}
		})
	}
}

func quietSlog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestExtremeTTLs: a ClaimTTL and a DoneTTL of math.MaxInt64 (292 years)
// go to PX in milliseconds, far below what Redis refuses as an invalid
// expire time: the claim holds and the done entry stays, for centuries.
func TestExtremeTTLs(t *testing.T) {
	forEachClient(t, func(t *testing.T, kind string) {
		rdb, prefix := redistest.RedisClient(t)
		fp := fastOn(t, kind, rdb, &redisinbox.Config{Prefix: prefix, ClaimTTL: math.MaxInt64, DoneTTL: math.MaxInt64, Timeout: 10 * time.Second})
		ctx := ctxT(t)
		const centuries = 200 * 365 * 24 * time.Hour
		st, tok, err := fp.Claim(ctx, "k")
		if err != nil || st != inbox.FastClaimed {
			t.Fatalf("first claim: %v %v", st, err)
		}
		if st, _, err := fp.Claim(ctx, "k"); err != nil || st != inbox.FastBusy {
			t.Fatalf("second claim: %v %v, want busy", st, err)
		}
		if ttl := rdb.PTTL(ctx, prefix+"k").Val(); ttl < centuries {
			t.Fatalf("claim TTL %v, want more than 200 years", ttl)
		}
		if err := fp.Complete(ctx, "k", tok); err != nil {
			t.Fatal(err)
		}
		if st, _, err := fp.Claim(ctx, "k"); err != nil || st != inbox.FastDone {
			t.Fatalf("after complete: %v %v, want done", st, err)
		}
		if ttl := rdb.PTTL(ctx, prefix+"k").Val(); ttl < centuries {
			t.Fatalf("done TTL %v, want more than 200 years", ttl)
		}
	})
}
