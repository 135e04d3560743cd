package tiered_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/tiered"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		crashChild()
		return
	}
	redis.SetLogger(quietLogger{}) // the outage cases make go-redis log every failed dial
	// After PoolSize failed dials (a refused Redis), go-redis starts a probe
	// goroutine that sleeps a second between dials and ends at the first
	// one after its client is closed: not a leak of ours, and it may
	// outlive goleak's retries by a moment.
	os.Exit(testenv.RunOnEachRedisClient(m, "tiered", &suiteClient, append(testenv.RueidisLeakOptions(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))...))
}

// The whole suite runs once per Redis client (testenv.RunOnEachRedisClient
// sets suiteClient): every fast store is a redisstore on that client
// (fastOn). Tests inspect Redis through their own go-redis client.
var suiteClient = testenv.GoRedisKind

// childClientEnv tells a crash child which client to use.
const childClientEnv = "IDEM_TIERED_CLIENT"

// fastOn returns a redisstore with cfg on the server c talks to, through
// the suite's client.
func fastOn(t testing.TB, c *redis.Client, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	return redistest.RedisStoreOn(t, suiteClient, c, cfg)
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func newKey() idem.Key { return idem.MustKey("tenant-t", testenv.Name("k")) }

// fastOnShared returns a redisstore on the shared Redis, under a prefix of
// its own.
func fastOnShared(t testing.TB) *redisstore.Store {
	t.Helper()
	_, prefix := redistest.RedisClient(t) // deletes the prefix's keys at the end
	return fastOn(t, sharedClient(t), &redisstore.Config{Prefix: prefix})
}

// fastOnPrivate returns a redisstore on a private redis-server that the
// test may kill, flush and restart.
func fastOnPrivate(t *testing.T) (*redisstore.Store, *redis.Client, *testenv.RedisServer) {
	t.Helper()
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 200 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return fastOn(t, c, nil), c, srv
}

// sharedClient returns a client of the shared Redis with
// ContextTimeoutEnabled (redisstore refuses one without).
func sharedClient(t testing.TB) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testenv.Redis.DSN())
	if err != nil {
		t.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

func fastUnreachable(t testing.TB) *redisstore.Store {
	return redistest.UnreachableRedisStore(t, suiteClient, nil)
}

// sqlCounter counts the bytes-carrying writes every connection of a pool
// sends to PostgreSQL: each query, prepared or not, inside a transaction or
// not, is at least one. It sees what database/sql and pgx send, below any
// cache either might keep.
type sqlCounter struct{ writes atomic.Int64 }

type countingConn struct {
	net.Conn
	n *sqlCounter
}

func (c *countingConn) Write(b []byte) (int, error) {
	c.n.writes.Add(1)
	return c.Conn.Write(b)
}

// durableOnPostgres returns a migrated sqlstore on a fresh PostgreSQL
// schema, its DSN, and a counter of the messages its pool sends.
func durableOnPostgres(t testing.TB) (*sqlstore.Store, string, *sqlCounter) {
	t.Helper()
	_, dsn := testenv.PostgresDB(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	n := &sqlCounter{}
	var d net.Dialer
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &countingConn{Conn: c, n: n}, nil
	}
	db := stdlib.OpenDB(*cfg)
	db.SetMaxIdleConns(32) // database/sql keeps 2 by default: parallel callers would reconnect all the time
	t.Cleanup(func() { db.Close() })
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s, dsn, n
}

func durableUnreachable(t testing.TB) idem.Store {
	dsn := "postgres://postgres@127.0.0.1:" + strconv.Itoa(testenv.RefusedPort(t)) + "/test?sslmode=disable&connect_timeout=1"
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func durableInMemory(t testing.TB) *memstore.Store {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { s.Close() })
	return s
}

func newTiered(t testing.TB, fast, durable idem.Store, cfg *tiered.Config) *tiered.Store {
	t.Helper()
	var c tiered.Config
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = discard
	}
	s, err := tiered.New(fast, durable, &c)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// spyStore counts the calls a store receives and can fail them on demand.
type spyStore struct {
	idem.Store
	begins, completes, releases, extends, gets atomic.Int64
	holds, forgets                             atomic.Int64

	failComplete, failRelease atomic.Bool
	// loseBeginAnswer: run BeginWithToken, then report a timeout, as when
	// the reply is lost after the script ran.
	loseBeginAnswer atomic.Bool
	// refuseBegin: fail BeginWithToken without running it, as a refused
	// connection does.
	refuseBegin atomic.Bool
}

var errInjected = idem.StoreError(context.Background(), "injected", io.ErrUnexpectedEOF)

func (s *spyStore) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	s.begins.Add(1)
	return s.Store.Begin(ctx, req)
}

// BeginWithToken passes through to a TokenBeginner underneath.
func (s *spyStore) BeginWithToken(ctx context.Context, req idem.BeginRequest, token idem.Token) (idem.Claim, error) {
	s.begins.Add(1)
	if s.refuseBegin.Load() {
		return idem.Claim{}, idem.StoreError(context.Background(), "begin", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")})
	}
	c, err := s.Store.(tiered.TokenBeginner).BeginWithToken(ctx, req, token)
	if err == nil && s.loseBeginAnswer.Load() {
		return idem.Claim{}, context.DeadlineExceeded
	}
	return c, err
}

// Adopt, CompleteUntil and Forget pass through to a tiered.Mirror
// underneath, so that a spy in front of redisstore is still one.
func (s *spyStore) Adopt(ctx context.Context, req idem.BeginRequest, token idem.Token) (idem.Owner, error) {
	s.holds.Add(1)
	return s.Store.(tiered.Mirror).Adopt(ctx, req, token)
}

func (s *spyStore) CompleteUntil(ctx context.Context, o idem.Owner, r []byte, until time.Time) error {
	s.completes.Add(1)
	if s.failComplete.Load() {
		return errInjected
	}
	return s.Store.(tiered.Mirror).CompleteUntil(ctx, o, r, until)
}

func (s *spyStore) Forget(ctx context.Context, k idem.Key) error {
	s.forgets.Add(1)
	return s.Store.(tiered.Mirror).Forget(ctx, k)
}

func (s *spyStore) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	s.completes.Add(1)
	if s.failComplete.Load() {
		return errInjected
	}
	return s.Store.Complete(ctx, o, r)
}

func (s *spyStore) Release(ctx context.Context, o idem.Owner) error {
	s.releases.Add(1)
	if s.failRelease.Load() {
		return errInjected
	}
	return s.Store.Release(ctx, o)
}

func (s *spyStore) Extend(ctx context.Context, o idem.Owner, d time.Duration) error {
	s.extends.Add(1)
	return s.Store.Extend(ctx, o, d)
}

func (s *spyStore) Get(ctx context.Context, k idem.Key) (idem.Record, error) {
	s.gets.Add(1)
	return s.Store.Get(ctx, k)
}

func (s *spyStore) calls() int64 {
	return s.begins.Load() + s.completes.Load() + s.releases.Load() + s.extends.Load() + s.gets.Load() +
		s.holds.Load() + s.forgets.Load()
}

func sqlOpen(dsn string) (*sql.DB, error) { return sql.Open("pgx", dsn) }
