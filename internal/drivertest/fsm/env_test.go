package fsm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/internal/drivertest/sqlenv"
	"github.com/idemkit/idem/internal/testenv"
)

// dialects lists every database each DB test (and benchmark) runs on.
var dialects = sqlenv.Dialects

// env is one test's private table on one database.
type env struct {
	t       testing.TB
	dialect fsm.Dialect
	db      *sql.DB
	dsn     string // for child processes: a DSN (or SQLite DSN) reaching the same table
	table   string
}

// eachDB runs fn once per dialect as parallel subtests.
func eachDB(t *testing.T, fn func(t *testing.T, e *env)) {
	t.Helper()
	sqlenv.EachDialect(t, func(t *testing.T, d fsm.Dialect) { fn(t, newEnv(t, d)) })
}

func newEnv(tb testing.TB, d fsm.Dialect) *env {
	tb.Helper()
	e := &env{t: tb, dialect: d, table: testenv.Name("orders")}
	e.db, e.dsn = sqlenv.DialectDB(tb, d)
	// The shared servers serve up to eight helpers at once: keep pools small.
	e.db.SetMaxOpenConns(8)
	e.exec(fmt.Sprintf(`CREATE TABLE %s (
		id BIGINT PRIMARY KEY,
		status VARCHAR(32) NOT NULL,
		version BIGINT NOT NULL DEFAULT 0,
		paid_at VARCHAR(64) NULL,
		note VARCHAR(64) NULL,
		fence BIGINT NOT NULL DEFAULT 0)`, e.table))
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

// ph is the n-th placeholder of the env's dialect, for hand-written test SQL.
func (e *env) ph(n int) string { return e.dialect.Placeholder(n) }

func (e *env) insert(id int64, state string, version int64) {
	e.t.Helper()
	e.exec(fmt.Sprintf("INSERT INTO %s (id, status, version) VALUES (%s, %s, %s)", e.table, e.ph(1), e.ph(2), e.ph(3)),
		id, state, version)
}

// force sets a row's state and bumps its version behind the machine's back
// (a concurrent writer, or corrupted data).
func (e *env) force(id int64, state string) {
	e.t.Helper()
	e.exec(fmt.Sprintf("UPDATE %s SET status = %s, version = version + 1 WHERE id = %s", e.table, e.ph(1), e.ph(2)), state, id)
}

type row struct {
	State   string
	Version int64
	PaidAt  sql.NullString
	Note    sql.NullString
}

func (e *env) row(id int64) row {
	e.t.Helper()
	var r row
	err := e.db.QueryRowContext(context.Background(),
		fmt.Sprintf("SELECT status, version, paid_at, note FROM %s WHERE id = %s", e.table, e.ph(1)), id).
		Scan(&r.State, &r.Version, &r.PaidAt, &r.Note)
	if err != nil {
		e.t.Fatalf("read row %d: %v", id, err)
	}
	return r
}

// orderDef is the order machine of the package documentation.
func orderDef() fsm.Definition {
	return fsm.Definition{
		Initial: "CREATED",
		States:  []string{"CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"},
		Transitions: []fsm.Transition{
			{Name: "pay", From: []string{"CREATED"}, To: "PAID"},
			{Name: "ship", From: []string{"PAID"}, To: "SHIPPED"},
			{Name: "deliver", From: []string{"SHIPPED"}, To: "DELIVERED"},
			{Name: "cancel", From: []string{"CREATED", "PAID"}, To: "CANCELLED"},
		},
	}
}

func (e *env) machine(cfg *fsm.Config) *fsm.Machine {
	e.t.Helper()
	m, err := fsm.New(e.dialect, e.table, orderDef(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

// countingExec counts statements and can run a hook before each one (to
// inject a concurrent writer at an exact point).
type countingExec struct {
	fsm.Executor
	n      atomic.Int64
	mu     sync.Mutex
	log    []string
	before func(n int64, query string)
}

func (c *countingExec) note(query string) {
	n := c.n.Add(1)
	c.mu.Lock()
	c.log = append(c.log, query)
	c.mu.Unlock()
	if c.before != nil {
		c.before(n, query)
	}
}

func (c *countingExec) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	c.note(query)
	return c.Executor.ExecContext(ctx, query, args...)
}

func (c *countingExec) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	c.note(query)
	return c.Executor.QueryRowContext(ctx, query, args...)
}

func ptr[T any](v T) *T { return &v }

// updateSQL is the statement m.Fire sends first for t: Fire on a
// sqlenv.Recorder, which keeps it and runs nothing.
func updateSQL(tb testing.TB, m *fsm.Machine, t fsm.Transition, id any, opts *fsm.Options) string {
	tb.Helper()
	r := sqlenv.NewRecorder()
	defer r.DB.Close()
	if _, err := m.Fire(context.Background(), r.DB, id, t.Name, opts); !errors.Is(err, sqlenv.ErrRecorded) {
		tb.Fatalf("Fire on a recorder: %v, want sqlenv.ErrRecorded", err)
	}
	return r.Statements()[0]
}
