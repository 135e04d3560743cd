package pglock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"sync"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// sessions is a pool on a private PostgreSQL schema whose sessions a test
// can also reach past database/sql, to change one that a Lease holds
// without asking the Lease: each driver connection is kept, and calls on
// it (the pool's and the test's) take turns on its mutex.
type sessions struct {
	DB *sql.DB

	mu    sync.Mutex
	conns []*session
}

func newSessions(tb testing.TB) *sessions {
	tb.Helper()
	_, dsn := testenv.PostgresDB(tb)
	probe, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	dc, ok := probe.Driver().(driver.DriverContext)
	probe.Close()
	if !ok {
		tb.Fatal("pgx driver has no OpenConnector")
	}
	c, err := dc.OpenConnector(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	s := &sessions{}
	s.DB = sql.OpenDB(&sessionConnector{Connector: c, s: s})
	tb.Cleanup(func() { s.DB.Close() })
	return s
}

// execEverywhere runs query on every open session directly and returns
// how many of them answered true.
func (s *sessions) execEverywhere(ctx context.Context, query string, args ...driver.NamedValue) (int, error) {
	s.mu.Lock()
	conns := append([]*session(nil), s.conns...)
	s.mu.Unlock()
	n := 0
	for _, c := range conns {
		c.mu.Lock()
		rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
		if err == nil {
			v := make([]driver.Value, 1)
			if rows.Next(v) == nil && v[0] == true {
				n++
			}
			err = rows.Close()
		}
		c.mu.Unlock()
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

type sessionConnector struct {
	driver.Connector
	s *sessions
}

func (c *sessionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc := &session{Conn: conn}
	c.s.mu.Lock()
	c.s.conns = append(c.s.conns, sc)
	c.s.mu.Unlock()
	return sc, nil
}

type session struct {
	mu sync.Mutex
	driver.Conn
}

func (c *session) Prepare(query string) (driver.Stmt, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Prepare(query)
}

func (c *session) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *session) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *session) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *session) CheckNamedValue(v *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(v)
}

func (c *session) ResetSession(ctx context.Context) error {
	r, ok := c.Conn.(driver.SessionResetter)
	if !ok {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.ResetSession(ctx)
}
