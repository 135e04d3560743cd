package sqlerr_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"strings"
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

	// A migration holds the table (LOCK TABLE … ACCESS EXCLUSIVE) while
	// the statement timeout runs out: 57014, transient.
	migration, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer migration.Rollback()
	if _, err := migration.ExecContext(ctx, fmt.Sprintf(`LOCK TABLE %s IN ACCESS EXCLUSIVE MODE`, table)); err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `SET statement_timeout = '200ms'`); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, fmt.Sprintf(`UPDATE %s SET v = 3 WHERE id = 1`, table))
	checkCancelled(t, "statement timeout behind LOCK TABLE", err, "57014")
	migration.Rollback()

	// pg_cancel_backend from an operator: 57014 too.
	var pid int
	if err := conn.QueryRowContext(ctx, `SET statement_timeout = 0; SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		if err := conn.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.ExecContext(ctx, `SET statement_timeout = 0`); err != nil {
		t.Fatal(err)
	}
	go func() {
		// Cancel until the sleep has been cancelled (the first cancel may
		// come before it starts); no timed assertion, only a retry.
		// Only once the sleep is running (state active), so that the cancel
		// cannot land on the idle connection before it.
		for range 400 {
			if ctx.Err() != nil {
				return
			}
			var ok bool
			err := db.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active' AND query LIKE 'SELECT pg_sleep%') AND pg_cancel_backend($1)`, pid).Scan(&ok)
			if err == nil && ok {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	_, err = conn.ExecContext(ctx, `SELECT pg_sleep(10)`)
	checkCancelled(t, "pg_cancel_backend", err, "57014")
}

func checkCancelled(t *testing.T, what string, err error, state string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	if got := sqlerr.SQLState(err); state != "" && got != state {
		t.Errorf("%s: SQLSTATE %q (%v), want %s", what, got, err, state)
	}
	if !sqlerr.IsCancelled(err) || !sqlerr.IsTransient(err) || !sqlerr.IsDriverTransient(err) {
		t.Errorf("%s: IsCancelled %v, IsTransient %v, IsDriverTransient %v; want all true (%v)",
			what, sqlerr.IsCancelled(err), sqlerr.IsTransient(err), sqlerr.IsDriverTransient(err), err)
	}
	if sqlerr.IsRetryable(err) || sqlerr.IsConnection(err) {
		t.Errorf("%s: a cancelled statement is neither a lost race nor a broken connection", what)
	}
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
	holder.Rollback()

	// A migration holds the table (LOCK TABLES … WRITE) while MariaDB's
	// max_statement_time runs out: 1969 (MySQL: 3024), transient.
	locker, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer locker.Close()
	if _, err := locker.ExecContext(ctx, fmt.Sprintf(`LOCK TABLES %s WRITE`, table)); err != nil {
		t.Fatal(err)
	}
	timeoutVar := `max_statement_time = 0.2` // MariaDB, seconds
	var version string
	if err := conn.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.ToLower(version), "mariadb") {
		timeoutVar = `max_execution_time = 200` // MySQL, ms (SELECT only)
	}
	if _, err := conn.ExecContext(ctx, `SET SESSION `+timeoutVar); err != nil {
		t.Fatal(err)
	}
	_, err = conn.ExecContext(ctx, fmt.Sprintf(`SELECT v FROM %s WHERE id = 1 FOR UPDATE`, table))
	checkCancelled(t, "statement timeout behind LOCK TABLES", err, "")
	if _, err := conn.ExecContext(ctx, `SET SESSION `+strings.Split(timeoutVar, " ")[0]+` = 0`); err != nil {
		t.Fatal(err)
	}
	if _, err := locker.ExecContext(ctx, `UNLOCK TABLES`); err != nil {
		t.Fatal(err)
	}

	// KILL QUERY from an operator: 1317.
	var id int64
	if err := conn.QueryRowContext(ctx, `SELECT CONNECTION_ID()`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range 100 {
			var n int
			if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE 'SELECT SLEEP%'`, id).Scan(&n); err != nil {
				return
			}
			if n > 0 {
				_, _ = db.ExecContext(ctx, fmt.Sprintf(`KILL QUERY %d`, id))
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	// SLEEP answers 1 when interrupted, without an error; a statement that
	// must read a row does fail with 1317.
	_, err = conn.ExecContext(ctx, fmt.Sprintf(`SELECT SLEEP(10) FROM %s FOR UPDATE`, table))
	checkCancelled(t, "KILL QUERY", err, "")
	if n, _ := sqlerr.MySQLNumber(err); n != 1317 && n != 1969 && n != 3024 {
		t.Errorf("KILL QUERY: MySQL error %d, want 1317", n)
	}
}

func TestDriverTransientIgnoresBareEOF(t *testing.T) {
	t.Parallel()
	for _, err := range []error{io.EOF, io.ErrUnexpectedEOF, fmt.Errorf("decode: %w", io.ErrUnexpectedEOF)} {
		if !sqlerr.IsTransient(err) {
			t.Errorf("IsTransient(%v) = false: a driver's EOF is a broken connection", err)
		}
		if sqlerr.IsDriverTransient(err) {
			t.Errorf("IsDriverTransient(%v) = true: a bare EOF may come from any decoder", err)
		}
	}
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
