package inbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// backend is one real database the tests run against.
type backend struct {
	name    string
	dialect inbox.Dialect
	open    func(t testing.TB) *sql.DB
}

func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_txlock=immediate"
}

func backends() []backend {
	return []backend{
		{"postgres", inbox.Postgres, func(t testing.TB) *sql.DB {
			db, _ := testenv.PostgresDB(t)
			db.SetMaxOpenConns(12)
			return db
		}},
		{"mysql", inbox.MySQL, func(t testing.TB) *sql.DB {
			db, _ := testenv.MySQLDB(t)
			db.SetMaxOpenConns(12)
			return db
		}},
		{"sqlite", inbox.SQLite, func(t testing.TB) *sql.DB {
			db, err := sql.Open("sqlite", sqliteDSN(testenv.SQLitePath(t)))
			if err != nil {
				t.Fatal(err)
			}
			// Switch the new file to WAL on one connection first: connections
			// that open a fresh file at once race on journal_mode(WAL), and
			// the loser gets SQLITE_BUSY without waiting for busy_timeout.
			if err := db.PingContext(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			// SQLite has one writer; more connections only add busy-wait
			// sleeps (its busy handler backs off up to 100ms).
			db.SetMaxOpenConns(2)
			t.Cleanup(func() { db.Close() })
			return db
		}},
	}
}

// fixture is an inbox over a fresh table plus an "effects" table where
// handlers record what they did.
type fixture struct {
	db      *sql.DB
	ib      *inbox.Inbox
	dialect inbox.Dialect
	table   string
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newFixture(t testing.TB, b backend, cfg *inbox.Config) *fixture {
	t.Helper()
	db := b.open(t)
	c := inbox.Config{}
	if cfg != nil {
		c = *cfg
	}
	c.Dialect = b.dialect
	c.Table = testenv.Name("inbox")
	ib, err := inbox.New(db, &c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	f := &fixture{db: db, ib: ib, dialect: b.dialect, table: c.Table}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+f.effects()+` (message_id VARCHAR(1000) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) effects() string { return f.table + "_effects" }

func (f *fixture) ph(n int) string { return f.dialect.Placeholder(n) }

// effect is a Handler that records one effect row for id.
func (f *fixture) effect(id string) inbox.Handler {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO `+f.effects()+` (message_id) VALUES (`+f.ph(1)+`)`, inbox.StoredMessageID(id))
		return err
	}
}

func (f *fixture) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := f.db.QueryRowContext(ctxT(t), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

func (f *fixture) effectsOf(t testing.TB, id string) int {
	return f.count(t, `SELECT COUNT(*) FROM `+f.effects()+` WHERE message_id = `+f.ph(1), inbox.StoredMessageID(id))
}

func (f *fixture) totalEffects(t testing.TB) int {
	return f.count(t, `SELECT COUNT(*) FROM `+f.effects())
}

func (f *fixture) dedupRows(t testing.TB) int {
	return f.count(t, `SELECT COUNT(*) FROM `+f.table)
}

// backdate makes every dedup row (or those of one message) an hour older.
func (f *fixture) backdate(t testing.TB, where string, args ...any) {
	t.Helper()
	var set string
	switch f.dialect {
	case inbox.Postgres:
		set = `created_at = created_at - interval '1 hour'`
	case inbox.MySQL:
		set = `created_at = created_at - INTERVAL 1 HOUR`
	default:
		set = `created_at = created_at - 3600000`
	}
	q := `UPDATE ` + f.table + ` SET ` + set
	if where != "" {
		q += ` WHERE ` + where
	}
	if _, err := f.db.ExecContext(ctxT(t), q, args...); err != nil {
		t.Fatal(err)
	}
}

// forEachBackend runs fn as a parallel subtest per database.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}
