package sqlerr_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqlerr"
	"github.com/idemkit/idem/internal/testenv"
)

// The cases below are real errors from the real servers, produced by the
// faults they name.

func TestPostgres(t *testing.T) {
	t.Parallel()
	db, _ := testenv.PostgresDB(t)
	ctx := context.Background()
	table := testenv.Name("sqlerr")
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int)`, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + table) })
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (1, 0)`, table)); err != nil {
		t.Fatal(err)
	}

	_, err := db.ExecContext(ctx, "SELEC 1")
	check(t, "syntax error", err, false, false)

	// lock_not_available: a row lock held by another transaction.
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET v = 1 WHERE id = 1`, table)); err != nil {
		t.Fatal(err)
	}
	waiter, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Rollback()
	if _, err := waiter.ExecContext(ctx, `SET LOCAL lock_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = waiter.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET v = 2 WHERE id = 1`, table))
	check(t, "lock timeout", err, true, false)
	waiter.Rollback()
	holder.Rollback()

	// A reset in the middle of a query, through a real TCP connection.
	p := testenv.NewFaultProxy(t, "127.0.0.1:5432")
	dsn := testenv.Redirect(testenv.Postgres.DSN(), p.Addr())
	viaProxy, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer viaProxy.Close()
	if err := viaProxy.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	// Reset while the statement runs on the server: not safe to resend, so
	// database/sql does not retry it and the error reaches the caller.
	go func() { time.Sleep(300 * time.Millisecond); p.ResetAll() }()
	_, err = viaProxy.ExecContext(ctx, "SELECT pg_sleep(3)")
	check(t, "reset mid-statement", err, false, true)

	p.Set(testenv.Refuse)
	viaProxy.SetMaxIdleConns(0)
	_, err = viaProxy.ExecContext(ctx, "SELECT 1")
	check(t, "refused", err, false, true)

	cctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	_, err = db.ExecContext(cctx, "SELECT pg_sleep(1)")
	check(t, "caller's deadline", err, false, false)
}

func TestMySQL(t *testing.T) {
	t.Parallel()
	db, _ := testenv.MySQLDB(t)
	ctx := context.Background()
	table := testenv.Name("sqlerr")
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`CREATE TABLE %s (id int PRIMARY KEY, v int) ENGINE=InnoDB`, table)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Exec("DROP TABLE " + table) })
	if _, err := db.ExecContext(ctx, fmt.Sprintf(`INSERT INTO %s VALUES (1, 0)`, table)); err != nil {
		t.Fatal(err)
	}
	holder, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET v = 1 WHERE id = 1`, table)); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET SESSION innodb_lock_wait_timeout = 1`); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET v = 2 WHERE id = 1`, table))
	check(t, "lock wait timeout", err, true, false)
	if n, ok := sqlerr.MySQLNumber(err); !ok || n != 1205 {
		t.Errorf("MySQLNumber = %d, %v; want 1205", n, ok)
	}
	_, err = db.ExecContext(ctx, "SELEC 1")
	check(t, "syntax error", err, false, false)
}

func TestWrapped(t *testing.T) {
	t.Parallel()
	if sqlerr.IsTransient(nil) || sqlerr.IsTransient(context.Canceled) ||
		sqlerr.IsTransient(fmt.Errorf("x: %w", context.DeadlineExceeded)) {
		t.Fatal("nil or context errors must not be transient")
	}
	if sqlerr.IsTransient(errors.New("boom")) {
		t.Fatal("an arbitrary error is not transient")
	}
}

func check(t *testing.T, what string, err error, retryable, connection bool) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if got := sqlerr.IsRetryable(err); got != retryable {
		t.Errorf("%s: IsRetryable(%v) = %v, want %v", what, err, got, retryable)
	}
	if got := sqlerr.IsConnection(err); got != connection {
		t.Errorf("%s: IsConnection(%v) = %v, want %v", what, err, got, connection)
	}
	if got := sqlerr.IsTransient(err); got != (retryable || connection) {
		t.Errorf("%s: IsTransient(%v) = %v", what, err, got)
	}
}
