package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net"
	"sync"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// trips counts network round trips: the waits for an answer. A run of
// writes followed by a read is one; a write that expects no answer (MySQL's
// COM_STMT_CLOSE) adds none.
type trips struct {
	mu      sync.Mutex
	n       int
	writing bool
}

func (c *trips) wrote() {
	c.mu.Lock()
	c.writing = true
	c.mu.Unlock()
}

func (c *trips) read() {
	c.mu.Lock()
	if c.writing {
		c.n++
		c.writing = false
	}
	c.mu.Unlock()
}

func (c *trips) reset() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n, c.writing = 0, false
	return n
}

type countingConn struct {
	net.Conn
	c *trips
}

func (cc countingConn) Write(p []byte) (int, error) { cc.c.wrote(); return cc.Conn.Write(p) }
func (cc countingConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	if n > 0 {
		cc.c.read()
	}
	return n, err
}

func dialCounting(c *trips) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{conn, c}, nil
	}
}

// statements counts the statements a database/sql driver runs, for SQLite,
// which has no network.
type statements struct {
	drv driver.Driver
	dsn string
	c   *trips
}

func (s statements) Connect(context.Context) (driver.Conn, error) {
	conn, err := s.drv.Open(s.dsn)
	if err != nil {
		return nil, err
	}
	return countedConn{conn.(sqliteConn), s.c}, nil
}

func (s statements) Driver() driver.Driver { return s.drv }

type sqliteConn interface {
	driver.Conn
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnBeginTx
}

type countedConn struct {
	sqliteConn
	c *trips
}

func (cc countedConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	cc.c.wrote()
	cc.c.read()
	return cc.sqliteConn.ExecContext(ctx, q, args)
}

func (cc countedConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	cc.c.wrote()
	cc.c.read()
	return cc.sqliteConn.QueryContext(ctx, q, args)
}

func (cc countedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	cc.c.wrote()
	cc.c.read()
	return cc.sqliteConn.BeginTx(ctx, opts)
}

// countingDB opens b's isolated database through a pool of one connection
// whose round trips (statements, for SQLite) c counts.
func countingDB(t *testing.T, b backend, variant string, c *trips) *sql.DB {
	_, dsn := b.open(t)
	var db *sql.DB
	switch b.dialect {
	case sqlstore.Postgres:
		cfg, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DialFunc = dialCounting(c)
		db = stdlib.OpenDB(*cfg)
	case sqlstore.MySQL:
		cfg, err := mysql.ParseDSN(dsn)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Net = testenv.Name("counting")
		mysql.RegisterDialContext(cfg.Net, func(ctx context.Context, addr string) (net.Conn, error) {
			return dialCounting(c)(ctx, "tcp", addr)
		})
		cfg.InterpolateParams = variant == "interpolateParams"
		connector, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db = sql.OpenDB(connector)
	case sqlstore.SQLite:
		db = sql.OpenDB(statements{drv: &sqlite.Driver{}, dsn: dsn, c: c})
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestRoundTrips proves the cost of the common paths: on PostgreSQL a first
// claim plus its completion takes two round trips and a replay one, which
// writes nothing. The other dialects' counts are logged (and bounded).
func TestRoundTrips(t *testing.T) {
	type variant struct {
		b                   backend
		name                string
		maxFirst, maxReplay int
		maxMark             int
	}
	variants := []variant{
		{backends[0], "", 2, 1, 1},
		{backends[1], "interpolateParams", 3, 1, 1},
		{backends[1], "prepared", 6, 2, 2}, // go-sql-driver prepares each statement with arguments
		{backends[2], "", 3, 1, 1},
	}
	for _, v := range variants {
		t.Run(v.b.name+"/"+v.name, func(t *testing.T) {
			c := &trips{}
			db := countingDB(t, v.b, v.name, c)
			s := newStore(t, v.b, db)
			ctx := ctxT(t)
			run := func(id string) (begin, mark, complete, replay int) {
				req := idem.BeginRequest{Key: idem.MustKey("rt", id), Fingerprint: idem.FingerprintOf([]byte("x"))}
				c.reset()
				cl, err := s.Begin(ctx, req)
				if err != nil || cl.Outcome != idem.Acquired {
					t.Fatalf("Begin = %v, %v", cl.Outcome, err)
				}
				begin = c.reset()
				if err := s.MarkStarted(ctx, cl.Owner); err != nil { // Options.AtMostOnce's one extra write
					t.Fatal(err)
				}
				mark = c.reset()
				if err := s.Complete(ctx, cl.Owner, []byte(`{"ok":true}`)); err != nil {
					t.Fatal(err)
				}
				complete = c.reset()
				r, err := s.Begin(ctx, req)
				if err != nil || r.Outcome != idem.Replay {
					t.Fatalf("replay Begin = %v, %v", r.Outcome, err)
				}
				replay = c.reset()
				return begin, mark, complete, replay
			}
			// The first uses of each statement prepare it on the connection
			// (pgx caches it from its second use).
			run("warm-up-1")
			run("warm-up-2")
			begin, mark, complete, replay := run("measured")
			t.Logf("%s %s: first claim %d + Complete %d = %d round trips; replay %d; MarkStarted %d", v.b.name, v.name, begin, complete, begin+complete, replay, mark)
			if begin+complete > v.maxFirst || replay > v.maxReplay {
				t.Errorf("first claim + Complete = %d round trips (want ≤ %d), replay = %d (want ≤ %d)", begin+complete, v.maxFirst, replay, v.maxReplay)
			}
			if mark > v.maxMark {
				t.Errorf("MarkStarted = %d round trips, want ≤ %d", mark, v.maxMark)
			}
			if begin == 0 || mark == 0 || complete == 0 || replay == 0 {
				t.Errorf("counter saw no traffic: %d %d %d %d", begin, mark, complete, replay)
			}
		})
	}
}

// A replay writes nothing: on PostgreSQL the record's row version (xmin,
// ctid) is the same before and after a hundred replays.
func TestReplayWritesNothing(t *testing.T) {
	t.Parallel()
	b := backends[0]
	db, _ := b.open(t)
	s := newStore(t, b, db)
	ctx := ctxT(t)
	req := idem.BeginRequest{Key: idem.MustKey("rt", "replay-read-only")}
	c, err := s.Begin(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
		t.Fatal(err)
	}
	d := req.Key.Digest()
	version := func() string {
		var v string
		if err := db.QueryRowContext(ctx, "SELECT xmin::text || '/' || ctid::text FROM "+storeTable(s)+" WHERE key_hash = $1", d[:]).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	before := version()
	for range 100 {
		if r, err := s.Begin(ctx, req); err != nil || r.Outcome != idem.Replay {
			t.Fatalf("replay = %v, %v", r.Outcome, err)
		}
	}
	if after := version(); after != before {
		t.Fatalf("row version changed from %s to %s by replays", before, after)
	}
}
