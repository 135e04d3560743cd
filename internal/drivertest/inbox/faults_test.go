package inbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"io"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/sqlerr"
	"github.com/idemkit/idem/internal/testenv"
)

// proxiedBackend opens the backend's database twice: directly (admin, for
// setup and checks) and through a fault proxy (for the inbox under test).
type proxied struct {
	admin   *sql.DB
	db      *sql.DB
	proxy   *testenv.FaultProxy
	dialect inbox.Dialect
}

func openProxied(t *testing.T, b backend) *proxied {
	t.Helper()
	var admin *sql.DB
	var dsn, driver, target string
	switch b.dialect {
	case inbox.Postgres:
		admin, dsn = testenv.PostgresDB(t)
		driver = "pgx"
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		target = u.Host
	case inbox.MySQL:
		admin, dsn = testenv.MySQLDB(t)
		driver = "mysql"
		i := strings.Index(dsn, "tcp(")
		j := strings.IndexByte(dsn[i:], ')')
		target = dsn[i+len("tcp(") : i+j]
	default:
		t.Fatalf("no network between the inbox and %s", b.name)
	}
	p := testenv.NewFaultProxy(t, target)
	db, err := sql.Open(driver, testenv.Redirect(dsn, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	t.Cleanup(func() { db.Close() })
	return &proxied{admin: admin, db: db, proxy: p, dialect: b.dialect}
}

func netBackends() []backend { return backends()[:2] }

func isMariaDB(t *testing.T, db *sql.DB) bool {
	t.Helper()
	var v string
	if err := db.QueryRow(`SELECT VERSION()`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return strings.Contains(strings.ToLower(v), "mariadb")
}

// TestInfrastructureErrorsKeepTheirCause: the database refuses connections,
// resets the connection in mid-transaction, or makes the handler time out on
// a lock. Each time Process returns an error whose cause an adapter can
// classify (inbox.IsTransient, built on sqlerr.IsTransient), nothing
// is committed, and once the database is back the redelivery is processed
// exactly once.
func TestInfrastructureErrorsKeepTheirCause(t *testing.T) {
	for _, b := range netBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			pr := openProxied(t, b)
			table := testenv.Name("inbox")
			ib, err := inbox.New(pr.db, &inbox.Config{Dialect: b.dialect, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if err := ib.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			f := &fixture{db: pr.admin, ib: ib, dialect: b.dialect, table: table}
			if _, err := pr.admin.ExecContext(ctx, `CREATE TABLE `+f.effects()+` (message_id VARCHAR(1000) NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			check := func(what string, err error, want func(error) bool) {
				t.Helper()
				if err == nil || !want(err) || !sqlerr.IsTransient(err) || !inbox.IsTransient(err) {
					t.Fatalf("%s: %v (connection %v, retryable %v): the cause is not classifiable", what, err, sqlerr.IsConnection(err), sqlerr.IsRetryable(err))
				}
			}

			// 1. Refused: the server is down.
			pr.proxy.Set(testenv.Refuse)
			_, err = ib.Process(ctx, "c", "m1", f.effect("m1"))
			check("refused", err, sqlerr.IsConnection)
			if errors.Is(err, inbox.ErrHandler) {
				t.Fatalf("refused: reported as a handler failure: %v", err)
			}
			pr.proxy.Set(testenv.Pass)

			// 2. Reset in mid-transaction, after the handler's first write.
			_, err = ib.Process(ctx, "c", "m2", func(ctx context.Context, tx *sql.Tx) error {
				if err := f.effect("m2")(ctx, tx); err != nil {
					return err
				}
				pr.proxy.ResetAll()
				_, err := tx.ExecContext(ctx, `SELECT 1`)
				return err
			})
			check("reset", err, sqlerr.IsConnection)

			// 3. Lock timeout: another transaction holds the row the
			// handler wants.
			if _, err := pr.admin.ExecContext(ctx, `CREATE TABLE `+table+`_acct (id INT PRIMARY KEY, n INT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			if _, err := pr.admin.ExecContext(ctx, `INSERT INTO `+table+`_acct VALUES (1, 0)`); err != nil {
				t.Fatal(err)
			}
			holder, err := pr.admin.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := holder.ExecContext(ctx, `UPDATE `+table+`_acct SET n = n + 1 WHERE id = 1`); err != nil {
				t.Fatal(err)
			}
			setTimeout := `SET LOCAL lock_timeout = '100ms'`
			if b.dialect == inbox.MySQL {
				setTimeout = `SET SESSION innodb_lock_wait_timeout = 1`
			}
			_, err = ib.Process(ctx, "c", "m3", func(ctx context.Context, tx *sql.Tx) error {
				if _, err := tx.ExecContext(ctx, setTimeout); err != nil {
					return err
				}
				_, err := tx.ExecContext(ctx, `UPDATE `+table+`_acct SET n = n + 1 WHERE id = 1`)
				return err
			})
			check("lock timeout", err, sqlerr.IsRetryable)
			if !inbox.IsRetryable(err) {
				t.Fatalf("lock timeout: inbox.IsRetryable false: %v", err)
			}
			if err := holder.Rollback(); err != nil {
				t.Fatal(err)
			}

			// 4. The connection closes in the middle of the reply to the
			// handler's statement: whatever the driver makes of it (pgx
			// may return a bare io.ErrUnexpectedEOF), the inbox's rollback
			// on the dead connection fails too, and that is recognised.
			_, err = ib.Process(ctx, "c", "m4", func(ctx context.Context, tx *sql.Tx) error {
				pr.proxy.CutNextReply(1)
				_, err := tx.ExecContext(ctx, `SELECT 1`)
				return err
			})
			if err == nil || !inbox.IsTransient(err) {
				t.Fatalf("reply cut under the handler: IsTransient(%v) = false", err)
			}

			// 5. A migration holds the table (LOCK TABLE) and the
			// handler's statement times out behind it: the server
			// cancelled it (57014, MariaDB 1969), not the message's fault.
			lockConn, err := pr.admin.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer lockConn.Close()
			acct := table + `_acct`
			timedOut := `SELECT n FROM ` + acct + ` WHERE id = 1 FOR UPDATE`
			if b.dialect == inbox.Postgres {
				if _, err := lockConn.ExecContext(ctx, `BEGIN; LOCK TABLE `+acct+` IN ACCESS EXCLUSIVE MODE`); err != nil {
					t.Fatal(err)
				}
			} else {
				if _, err := lockConn.ExecContext(ctx, `LOCK TABLES `+acct+` WRITE`); err != nil {
					t.Fatal(err)
				}
				timedOut = `SET STATEMENT max_statement_time = 0.2 FOR ` + timedOut
				if !isMariaDB(t, pr.admin) {
					timedOut = `SELECT /*+ MAX_EXECUTION_TIME(200) */ n FROM ` + acct + ` WHERE id = 1 FOR UPDATE`
				}
			}
			_, err = ib.Process(ctx, "c", "m5", func(ctx context.Context, tx *sql.Tx) error {
				if b.dialect == inbox.Postgres {
					if _, err := tx.ExecContext(ctx, `SET LOCAL statement_timeout = '200ms'`); err != nil {
						return err
					}
				}
				var n int
				return tx.QueryRowContext(ctx, timedOut).Scan(&n)
			})
			if err == nil || !sqlerr.IsCancelled(err) || !inbox.IsTransient(err) {
				t.Fatalf("statement timeout behind LOCK TABLE: %v (cancelled %v, transient %v)", err, sqlerr.IsCancelled(err), inbox.IsTransient(err))
			}
			unlock := `ROLLBACK`
			if b.dialect != inbox.Postgres {
				unlock = `UNLOCK TABLES`
			}
			if _, err := lockConn.ExecContext(ctx, unlock); err != nil {
				t.Fatal(err)
			}

			// 6. The body does not decode: poison, not an outage.
			_, err = ib.Process(ctx, "c", "m6", func(ctx context.Context, tx *sql.Tx) error {
				var v struct{ Order int }
				return json.NewDecoder(strings.NewReader(`{"Order": 4`)).Decode(&v)
			})
			if !errors.Is(err, io.ErrUnexpectedEOF) || inbox.IsTransient(err) {
				t.Fatalf("truncated body: IsTransient(%v) = true", err)
			}

			// Nothing was committed; the redeliveries run once each.
			if n := f.dedupRows(t); n != 0 {
				t.Fatalf("%d dedup rows committed by failed deliveries", n)
			}
			for _, id := range []string{"m1", "m2", "m3", "m4", "m5"} {
				if out, err := ib.Process(ctx, "c", id, f.effect(id)); err != nil || out != inbox.Processed {
					t.Fatalf("redelivery of %s: %v, %v", id, out, err)
				}
				if n := f.effectsOf(t, id); n != 1 {
					t.Fatalf("%s: %d effects, want 1", id, n)
				}
			}
		})
	}
}

// TestDeadlockInHandlerIsRetried: two messages' handlers update two rows in
// opposite orders, each waiting for the other to take its first lock: a real
// deadlock. The database aborts one transaction; Process runs it again and
// both messages are processed, each effect exactly once.
func TestDeadlockInHandlerIsRetried(t *testing.T) {
	for _, b := range netBackends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, b, nil)
			ctx := ctxT(t)
			acct := f.table + "_acct"
			if _, err := f.db.ExecContext(ctx, `CREATE TABLE `+acct+` (id INT PRIMARY KEY, n INT NOT NULL)`); err != nil {
				t.Fatal(err)
			}
			if _, err := f.db.ExecContext(ctx, `INSERT INTO `+acct+` VALUES (1, 0), (2, 0)`); err != nil {
				t.Fatal(err)
			}
			var firstLocks sync.WaitGroup
			firstLocks.Add(2)
			handler := func(id string, first, second int) inbox.Handler {
				var runs atomic.Int32
				return func(ctx context.Context, tx *sql.Tx) error {
					upd := `UPDATE ` + acct + ` SET n = n + 1 WHERE id = ` + f.ph(1)
					if _, err := tx.ExecContext(ctx, upd, first); err != nil {
						return err
					}
					if runs.Add(1) == 1 { // only the first run waits for the other
						firstLocks.Done()
						firstLocks.Wait()
					}
					if _, err := tx.ExecContext(ctx, upd, second); err != nil {
						return err
					}
					return f.effect(id)(ctx, tx)
				}
			}
			var wg sync.WaitGroup
			for _, m := range []struct {
				id            string
				first, second int
			}{{"a", 1, 2}, {"b", 2, 1}} {
				wg.Go(func() {
					if out, err := f.ib.Process(ctx, "c", m.id, handler(m.id, m.first, m.second)); err != nil || out != inbox.Processed {
						t.Errorf("%s: %v, %v", m.id, out, err)
					}
				})
			}
			wg.Wait()
			if s := f.ib.Stats(); s.TxRetries == 0 {
				t.Fatalf("no transaction was run again: the test produced no deadlock (%+v)", s)
			}
			for _, id := range []string{"a", "b"} {
				if n := f.effectsOf(t, id); n != 1 {
					t.Fatalf("%s: %d effects, want 1", id, n)
				}
			}
			if n := f.count(t, `SELECT SUM(n) FROM `+acct); n != 4 {
				t.Fatalf("sum %d, want 4 (each handler's two updates once)", n)
			}
		})
	}
}

// TestTxOptions: Process begins its transactions with Config.TxOptions. Under
// SERIALIZABLE, concurrent duplicates hit serialization failures, which
// Process runs again: still exactly one effect.
func TestTxOptions(t *testing.T) {
	b := backends()[0]
	f := newFixture(t, b, &inbox.Config{TxOptions: &sql.TxOptions{Isolation: sql.LevelSerializable}})
	ctx := ctxT(t)
	var level string
	if _, err := f.ib.Process(ctx, "c", "probe", func(ctx context.Context, tx *sql.Tx) error {
		return tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level)
	}); err != nil {
		t.Fatal(err)
	}
	if level != "serializable" {
		t.Fatalf("transaction isolation %q, want serializable", level)
	}
	var wg sync.WaitGroup
	var processed atomic.Int32
	for range 20 {
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
	if n := f.effectsOf(t, "same"); n != 1 || processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed; want 1, 1", n, processed.Load())
	}
	_, err := inbox.New(f.db, &inbox.Config{Dialect: inbox.Postgres, TxOptions: &sql.TxOptions{ReadOnly: true}})
	configtest.Want(t, err, "inbox", "Config.TxOptions")
}
