package optlock_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/internal/drivertest/sqlenv"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/optlock"
)

// dialects lists every database each DB test (and benchmark) runs on.
var dialects = sqlenv.Dialects

// env is one test's private accounts table on one database.
type env struct {
	t       testing.TB
	dialect optlock.Dialect
	db      *sql.DB
	dsn     string
	table   string
	tbl     *optlock.Table
}

func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	sqlenv.EachDialect(t, func(t *testing.T, d optlock.Dialect) { fn(t, newEnv(t, d)) })
}

func newEnv(tb testing.TB, d optlock.Dialect) *env {
	tb.Helper()
	e := &env{t: tb, dialect: d, table: testenv.Name("accounts")}
	e.db, e.dsn = sqlenv.DialectDB(tb, d)
	e.db.SetMaxOpenConns(8) // the shared servers serve several helpers at once
	e.exec(fmt.Sprintf(`CREATE TABLE %s (
		id BIGINT PRIMARY KEY,
		balance BIGINT NOT NULL,
		owner VARCHAR(64) NULL,
		version BIGINT NOT NULL)`, e.table))
	tbl, err := optlock.NewTable(d, e.table, nil)
	if err != nil {
		tb.Fatal(err)
	}
	e.tbl = tbl
	return e
}

func (e *env) exec(query string, args ...any) sql.Result {
	e.t.Helper()
	res, err := e.db.ExecContext(context.Background(), query, args...)
	if err != nil {
		e.t.Fatalf("%s: %v", query, err)
	}
	return res
}

func (e *env) ph(n int) string { return e.dialect.Placeholder(n) }

func (e *env) insert(id, balance, version int64) {
	e.t.Helper()
	e.exec(fmt.Sprintf("INSERT INTO %s (id, balance, version) VALUES (%s, %s, %s)", e.table, e.ph(1), e.ph(2), e.ph(3)),
		id, balance, version)
}

type account struct {
	Balance int64
	Owner   sql.NullString
	Version int64
}

// read is the "read" half of a read-modify-write, against db (the pool or a tx).
func (e *env) read(ctx context.Context, db interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, id int64) (account, error) {
	var a account
	err := db.QueryRowContext(ctx, fmt.Sprintf("SELECT balance, owner, version FROM %s WHERE id = %s", e.table, e.ph(1)), id).
		Scan(&a.Balance, &a.Owner, &a.Version)
	return a, err
}

func (e *env) row(id int64) account {
	e.t.Helper()
	a, err := e.read(context.Background(), e.db, id)
	if err != nil {
		e.t.Fatalf("read %d: %v", id, err)
	}
	return a
}

// countingExec counts the statements sent through it.
type countingExec struct {
	optlock.Executor
	n atomic.Int64
}

func (c *countingExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.n.Add(1)
	return c.Executor.ExecContext(ctx, query, args...)
}
