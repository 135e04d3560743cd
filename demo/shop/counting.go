package shop

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync/atomic"
)

// StatementCounter counts the round trips a *sql.DB makes to its database:
// every statement executed or queried, and every BEGIN, COMMIT and ROLLBACK.
// It wraps the driver, so it sees what the libraries (sqlstore, inbox, fsm)
// send as well as the shop's own SQL.
type StatementCounter struct{ n atomic.Int64 }

// Count returns the statements so far.
func (c *StatementCounter) Count() int64 { return c.n.Load() }

// openCounted opens dsn with drv through a connector that counts statements.
func openCounted(drv driver.Driver, dsn string, c *StatementCounter) *sql.DB {
	return sql.OpenDB(&countingConnector{drv: drv, dsn: dsn, c: c})
}

type countingConnector struct {
	drv driver.Driver
	dsn string
	c   *StatementCounter
}

func (k *countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	var (
		conn driver.Conn
		err  error
	)
	if dc, ok := k.drv.(driver.DriverContext); ok {
		var cn driver.Connector
		if cn, err = dc.OpenConnector(k.dsn); err != nil {
			return nil, err
		}
		conn, err = cn.Connect(ctx)
	} else {
		conn, err = k.drv.Open(k.dsn)
	}
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: conn, c: k.c}, nil
}

func (k *countingConnector) Driver() driver.Driver { return k.drv }

type countingConn struct {
	driver.Conn
	c *StatementCounter
}

var (
	_ driver.ExecerContext      = (*countingConn)(nil)
	_ driver.QueryerContext     = (*countingConn)(nil)
	_ driver.ConnBeginTx        = (*countingConn)(nil)
	_ driver.ConnPrepareContext = (*countingConn)(nil)
	_ driver.NamedValueChecker  = (*countingConn)(nil)
	_ driver.SessionResetter    = (*countingConn)(nil)
	_ driver.Validator          = (*countingConn)(nil)
	_ driver.Pinger             = (*countingConn)(nil)
)

func (c *countingConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	e, ok := c.Conn.(driver.ExecerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.c.n.Add(1)
	return e.ExecContext(ctx, q, args)
}

func (c *countingConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	e, ok := c.Conn.(driver.QueryerContext)
	if !ok {
		return nil, driver.ErrSkip
	}
	c.c.n.Add(1)
	return e.QueryContext(ctx, q, args)
}

func (c *countingConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	var (
		s   driver.Stmt
		err error
	)
	if p, ok := c.Conn.(driver.ConnPrepareContext); ok {
		s, err = p.PrepareContext(ctx, q)
	} else {
		s, err = c.Conn.Prepare(q)
	}
	if err != nil {
		return nil, err
	}
	return &countingStmt{Stmt: s, c: c.c}, nil
}

func (c *countingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	var (
		tx  driver.Tx
		err error
	)
	if b, ok := c.Conn.(driver.ConnBeginTx); ok {
		tx, err = b.BeginTx(ctx, opts)
	} else {
		//lint:ignore SA1019 the fallback for drivers without ConnBeginTx, as database/sql itself does
		tx, err = c.Conn.Begin() //nolint:staticcheck // see above
	}
	if err != nil {
		return nil, err
	}
	c.c.n.Add(1)
	return &countingTx{Tx: tx, c: c.c}, nil
}

func (c *countingConn) CheckNamedValue(nv *driver.NamedValue) error {
	if k, ok := c.Conn.(driver.NamedValueChecker); ok {
		return k.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}

func (c *countingConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

func (c *countingConn) IsValid() bool {
	if v, ok := c.Conn.(driver.Validator); ok {
		return v.IsValid()
	}
	return true
}

func (c *countingConn) Ping(ctx context.Context) error {
	if p, ok := c.Conn.(driver.Pinger); ok {
		return p.Ping(ctx)
	}
	return nil
}

type countingTx struct {
	driver.Tx
	c *StatementCounter
}

func (t *countingTx) Commit() error   { t.c.n.Add(1); return t.Tx.Commit() }
func (t *countingTx) Rollback() error { t.c.n.Add(1); return t.Tx.Rollback() }

type countingStmt struct {
	driver.Stmt
	c *StatementCounter
}

var errNoContext = errors.New("shop: driver statement lacks context support")

func (s *countingStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.c.n.Add(1)
	if e, ok := s.Stmt.(driver.StmtExecContext); ok {
		return e.ExecContext(ctx, args)
	}
	return nil, errNoContext
}

func (s *countingStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.c.n.Add(1)
	if q, ok := s.Stmt.(driver.StmtQueryContext); ok {
		return q.QueryContext(ctx, args)
	}
	return nil, errNoContext
}

func (s *countingStmt) CheckNamedValue(nv *driver.NamedValue) error {
	if k, ok := s.Stmt.(driver.NamedValueChecker); ok {
		return k.CheckNamedValue(nv)
	}
	return driver.ErrSkip
}
