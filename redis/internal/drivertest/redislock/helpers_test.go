package redislock_test

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redislock"
	_ "modernc.org/sqlite" // the SQLite driver of the fenced table
)

// The helpers of redis/redislock's tests, as far as the fencing tests need
// them: copied, keep in step. They cannot move to redis/internal/redistest: those
// tests are in package redislock, and redistest importing redislock would
// be an import cycle for them.

func TestMain(m *testing.M) {
	testenv.RaiseParallel(8) // the fault tests wait on TTLs and restarts
	os.Exit(testenv.RunOnEachRedisClient(m, "redislock", &suiteClient, testenv.RueidisLeakOptions()...))
}

// accounts is the storage side of the fencing tests: a SQLite table whose
// rows remember the fence of their last writer.
var accounts = lock.FencedTable{Table: "accounts", KeyColumn: "id", Placeholders: lock.Question}

func fencedSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+testenv.SQLitePath(t)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)`,
		`INSERT INTO accounts (id, balance) VALUES (7, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func balance(t *testing.T, db *sql.DB, id int) int {
	t.Helper()
	var b int
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = ?`, id).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

// newLocker returns a Locker on the shared Redis under the test's prefix.
func newLocker(t *testing.T, cfg *redislock.Config) (*redislock.Locker, *redis.Client) {
	t.Helper()
	shared, prefix := redistest.RedisClient(t)
	opt := *shared.Options()
	opt.ContextTimeoutEnabled = true // New refuses a client without it
	rdb := redis.NewClient(&opt)
	t.Cleanup(func() { rdb.Close() })
	c := redislock.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Prefix = prefix + "lock:"
	return lockerOn(t, rdb, &c), rdb
}

// configs remembers the Config lockerOn gave each Locker, for tests that build a second Locker like it.
var configs sync.Map // *redislock.Locker → redislock.Config

func configOf(l *redislock.Locker) redislock.Config {
	c, _ := configs.Load(l)
	return c.(redislock.Config)
}

// lockKeys are the Redis keys of a lock name under cfg.Prefix (default
// "idem:lock:"): the lock's own key and its fence counter's. The layout is
// stored state (a running release and the next share it), so the tests
// write it down.
func lockKeys(cfg redislock.Config, name string) (key, fenceKey string) {
	prefix := cfg.Prefix
	if prefix == "" {
		prefix = "idem:lock:"
	}
	key = prefix + "{" + name + "}"
	return key, key + ":fence"
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

func mustAcquire(t *testing.T, l *redislock.Locker, ctx context.Context, name string) *redislock.Lease {
	t.Helper()
	ls, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("acquire %q: %v", name, err)
	}
	return ls.(*redislock.Lease)
}

// The whole suite runs once per client: TestMain hands it to
// testenv.RunOnEachRedisClient, which sets suiteClient to each kind in
// turn, and every test builds its Lockers with lockerOn, which picks the
// client. Tests inspect Redis through their own
// go-redis client; only the Locker under test changes.
const (
	goRedisClient = testenv.GoRedisKind
	rueidisClient = testenv.RueidisKind
)

var suiteClient = goRedisClient

// lockerOn returns a Locker with cfg on the server rdb talks to, through the
// suite's client: rdb itself (go-redis) or a new rueidis client on the same
// address.
func lockerOn(t testing.TB, rdb *redis.Client, cfg *redislock.Config) *redislock.Locker {
	t.Helper()
	var (
		l   *redislock.Locker
		err error
	)
	switch suiteClient {
	case rueidisClient:
		l, err = redislock.NewRueidis(redistest.Rueidis(t, rdb.Options().Addr), cfg)
	default:
		l, err = redislock.New(rdb, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	c := redislock.Config{}
	if cfg != nil {
		c = *cfg
	}
	configs.Store(l, c)
	return l
}
