package adaptertest

import (
	"context"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// LockHold is how long LockDB.Migration holds the effects table: a few
// statement timeouts, short enough for CI.
const LockHold = 3 * time.Second

// LockDB is an effects database (PostgreSQL or MariaDB/MySQL) whose Inbox
// connections run with a short statement timeout (300ms), so that a
// handler waiting behind a migration's table lock is cancelled by the
// server: PostgreSQL 57014, MariaDB 1969. DB counts effects without the
// timeout.
type LockDB struct {
	*EffectDB
	Dialect inbox.Dialect
}

// NewLockInbox opens a fresh database of dialect d (inbox.Postgres or
// inbox.MySQL) with a migrated inbox and an effects table.
func NewLockInbox(t testing.TB, d inbox.Dialect) *LockDB {
	t.Helper()
	var admin *sql.DB
	var dsn, driver string
	switch d {
	case inbox.Postgres:
		admin, dsn = testenv.PostgresDB(t)
		driver, dsn = "pgx", addParam(dsn, "statement_timeout=300")
	case inbox.MySQL:
		admin, dsn = testenv.MySQLDB(t)
		driver = "mysql"
		var v string
		if err := admin.QueryRow(`SELECT VERSION()`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(strings.ToLower(v), "mariadb") {
			dsn = addParam(dsn, "max_statement_time=0.3")
		} else {
			t.Skip("the lock test needs MariaDB's max_statement_time (MySQL's max_execution_time covers SELECT only)")
		}
	default:
		t.Fatalf("NewLockInbox: %v has no statement timeout", d)
	}
	edb := SetupInbox(t, admin, d)
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ib, err := inbox.New(db, &inbox.Config{Dialect: d})
	if err != nil {
		t.Fatal(err)
	}
	return &LockDB{EffectDB: &EffectDB{DB: edb.DB, Inbox: ib}, Dialect: d}
}

func addParam(dsn, kv string) string {
	if strings.Contains(dsn, "?") {
		return dsn + "&" + kv
	}
	return dsn + "?" + kv
}

// Insert writes one effects row in tx, with the dialect's placeholders.
func (l *LockDB) Insert(ctx context.Context, tx *sql.Tx, id, body string) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, body) VALUES (`+l.Dialect.Placeholder(1)+`, `+l.Dialect.Placeholder(2)+`)`, id, body)
	return err
}

// Migration takes the effects table the way a schema migration does
// (PostgreSQL LOCK TABLE … ACCESS EXCLUSIVE, MariaDB LOCK TABLES … WRITE)
// and holds it for LockHold in the background. It returns once the lock
// is held, with a channel closed when it has been released.
func (l *LockDB) Migration(t testing.TB) <-chan struct{} {
	t.Helper()
	ctx := Ctx(t)
	conn, err := l.DB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lock, unlock := `LOCK TABLES effects WRITE`, `UNLOCK TABLES`
	if l.Dialect == inbox.Postgres {
		lock, unlock = `BEGIN; LOCK TABLE effects IN ACCESS EXCLUSIVE MODE`, `ROLLBACK`
	}
	if _, err := conn.ExecContext(ctx, lock); err != nil {
		conn.Close()
		t.Fatalf("lock: %v", err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		defer conn.Close()
		time.Sleep(LockHold)
		if _, err := conn.ExecContext(context.Background(), unlock); err != nil {
			t.Errorf("unlock: %v", err)
		}
	}()
	return released
}

// LockDialects are the databases the lock tests run on.
var LockDialects = []inbox.Dialect{inbox.Postgres, inbox.MySQL}
