package sqlmigrate_test

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/sqlmigrate"
	"github.com/idemkit/idem/internal/testenv"
)

func TestRunRejectsBadConfig(t *testing.T) {
	t.Parallel()
	db, _ := sqliteDB(t)
	ms := []sqlmigrate.Migration{{Version: 1, File: "001_a.sql", SQL: "SELECT 1;"}}
	good := testConfig(sqldialect.Postgres, "t")
	for name, c := range map[string]sqlmigrate.Config{
		"no dialect":       {VersionTable: good.VersionTable, CreateVersionTable: good.CreateVersionTable, RecordFunc: good.RecordFunc},
		"no version table": {Dialect: sqldialect.SQLite, CreateVersionTable: good.CreateVersionTable, RecordFunc: good.RecordFunc},
		"no record":        {Dialect: sqldialect.SQLite, VersionTable: good.VersionTable, CreateVersionTable: good.CreateVersionTable},
		"no lock":          {Dialect: sqldialect.MySQL, VersionTable: good.VersionTable, CreateVersionTable: good.CreateVersionTable, RecordFunc: good.RecordFunc},
	} {
		if err := sqlmigrate.Run(t.Context(), db, ms, c); err == nil {
			t.Errorf("%s: Run accepted %+v", name, c)
		}
	}
	unsorted := []sqlmigrate.Migration{{Version: 2, File: "002_b.sql"}, {Version: 1, File: "001_a.sql"}}
	if err := sqlmigrate.Run(t.Context(), db, unsorted, testConfig(sqldialect.SQLite, "t")); err == nil {
		t.Error("Run accepted migrations out of order")
	}
}

// backend is one database Run is tested on.
type backend struct {
	name    string
	dialect sqldialect.Dialect
	driver  string
	// open returns a fresh database (schema, database or file) and a DSN
	// that reaches it, for tests that open several pools.
	open func(t *testing.T) (*sql.DB, string)
}

var backends = []backend{
	{"Postgres", sqldialect.Postgres, "pgx", func(t *testing.T) (*sql.DB, string) { return testenv.PostgresDB(t) }},
	{"MySQL", sqldialect.MySQL, "mysql", func(t *testing.T) (*sql.DB, string) { return testenv.MySQLDB(t) }},
	{"SQLite", sqldialect.SQLite, "sqlite", sqliteDB},
}

func sqliteDB(t *testing.T) (*sql.DB, string) {
	// busy_timeout first, so that switching to WAL already waits for a
	// runner that holds the lock.
	dsn := "file:" + testenv.SQLitePath(t) + "?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	return openPool(t, "sqlite", dsn), dsn
}

func openPool(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db
}

// testConfig records versions in table+"_v" and locks on the table's name.
func testConfig(d sqldialect.Dialect, table string) sqlmigrate.Config {
	vt := table + "_v"
	c := sqlmigrate.Config{
		Dialect:            d,
		VersionTable:       vt,
		CreateVersionTable: "CREATE TABLE IF NOT EXISTS " + vt + " (version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL)",
		RecordFunc: func(m sqlmigrate.Migration) (string, []any) {
			return "INSERT INTO " + vt + " (version, name) VALUES (" + d.Placeholder(1) + ", " + d.Placeholder(2) + ")", []any{m.Version, m.File}
		},
	}
	switch d {
	case sqldialect.Postgres:
		c.LockKey, c.LockArg = `hashtextextended('idem/sqlmigrate/test:' || current_schema() || '.' || $1, 0)`, table
	case sqldialect.MySQL:
		c.LockKey, c.LockArg = `CONCAT('idem_sqlmigrate_test_', SHA1(CONCAT(DATABASE(), '.', ?)))`, table
	}
	return c
}

// testMigrations creates table, then a log table, then inserts one row into
// the log: a version applied twice would show as a second row (the insert
// is deliberately not idempotent).
func testMigrations(t *testing.T, table string) []sqlmigrate.Migration {
	t.Helper()
	fsys := fstest.MapFS{
		"001_create.sql": {Data: []byte("-- The table.\nCREATE TABLE IF NOT EXISTS {{table}} (\n    id INTEGER NOT NULL PRIMARY KEY -- a comment\n);\n")},
		"002_log.sql":    {Data: []byte("CREATE TABLE IF NOT EXISTS {{table}}_log (n INTEGER NOT NULL);\n\nINSERT INTO {{table}} (id) VALUES (7);\n")},
		"003_row.sql":    {Data: []byte("INSERT INTO {{table}}_log (n) VALUES (1);\n")},
	}
	ms, err := sqlmigrate.Load(fsys, ".", strings.NewReplacer("{{table}}", table))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

func count(t *testing.T, db *sql.DB, table string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM "+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// Eight pools, like eight processes starting at once, run the same
// migrations on a fresh database: none fails and each version is applied
// and recorded once. Running again is a no-op, and a later release's new
// version is applied alone.
func TestRunConcurrently(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := b.open(t)
			table := testenv.Name("mig")
			ms, c := testMigrations(t, table), testConfig(b.dialect, table)
			const n = 8
			pools := make([]*sql.DB, n)
			for i := range pools {
				pools[i] = openPool(t, b.driver, dsn)
			}
			start := make(chan struct{})
			errs := make([]error, n)
			var wg sync.WaitGroup
			for i, pool := range pools {
				wg.Go(func() {
					<-start
					errs[i] = sqlmigrate.Run(t.Context(), pool, ms[:2], c)
				})
			}
			close(start)
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("concurrent Run: %v", err)
			}
			if got := count(t, db, c.VersionTable); got != 2 {
				t.Errorf("%d versions recorded, want 2", got)
			}
			if got := count(t, db, table); got != 1 {
				t.Errorf("%d rows in %s, want 1", got, table)
			}

			// The next release adds 003, again from every pool at once.
			start = make(chan struct{})
			for i, pool := range pools {
				wg.Go(func() {
					<-start
					errs[i] = sqlmigrate.Run(t.Context(), pool, ms, c)
				})
			}
			close(start)
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("concurrent Run of the next release: %v", err)
			}
			if err := sqlmigrate.Run(t.Context(), db, ms, c); err != nil {
				t.Fatalf("Run again: %v", err)
			}
			if got := count(t, db, c.VersionTable); got != 3 {
				t.Errorf("%d versions recorded, want 3", got)
			}
			if got := count(t, db, table+"_log"); got != 1 {
				t.Errorf("003 inserted %d rows, want 1 (applied once)", got)
			}
			var name string
			if err := db.QueryRowContext(t.Context(), "SELECT name FROM "+c.VersionTable+" WHERE version = 3").Scan(&name); err != nil || name != "003_row.sql" {
				t.Errorf("version 3 recorded as %q, %v", name, err)
			}
			// The pools' connections were handed back clean: no open
			// transaction, no lock held (another Run would wait for it).
			for _, pool := range pools {
				if err := sqlmigrate.Run(t.Context(), pool, ms, c); err != nil {
					t.Fatalf("Run after Run on the same pool: %v", err)
				}
			}
		})
	}
}

// A failing statement is reported by its file, the run is rolled back where
// the dialect allows (PostgreSQL and SQLite: everything, version 001
// included; MySQL: its DDL has committed, but no version is recorded past
// the last good one), and a fixed release then succeeds.
func TestRunFailureRollsBack(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			table := testenv.Name("fail")
			c := testConfig(b.dialect, table)
			good := testMigrations(t, table)
			bad := slices.Clone(good)
			bad[1].File = "002_bad.sql"
			bad[1].SQL = "CREATE TABLE IF NOT EXISTS " + table + "_log (n INTEGER NOT NULL);\nINSERT INTO " + table + "_nowhere (n) VALUES (1);\n"
			err := sqlmigrate.Run(t.Context(), db, bad, c)
			if err == nil || !strings.Contains(err.Error(), "002_bad.sql") {
				t.Fatalf("Run with a failing statement = %v, want an error naming 002_bad.sql", err)
			}
			var exists int
			if err := db.QueryRowContext(t.Context(), tablesLike[b.dialect], table+"%").Scan(&exists); err != nil {
				t.Fatal(err)
			}
			if b.dialect == sqldialect.MySQL {
				// DDL commits implicitly: the table, the version table and
				// _log are there, and only 001 is recorded.
				if exists != 3 || count(t, db, c.VersionTable) != 1 {
					t.Errorf("MySQL after a failure: %d tables, %d versions; want 3 and 1", exists, count(t, db, c.VersionTable))
				}
			} else if exists != 0 {
				t.Errorf("%d tables named %s* after a failed run, want 0 (rolled back)", exists, table)
			}
			if err := sqlmigrate.Run(t.Context(), db, good, c); err != nil {
				t.Fatalf("Run of the fixed release: %v", err)
			}
			if got := count(t, db, c.VersionTable); got != 3 {
				t.Errorf("%d versions recorded, want 3", got)
			}
		})
	}
}

var tablesLike = map[sqldialect.Dialect]string{
	sqldialect.Postgres: "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE $1",
	sqldialect.MySQL:    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?",
	sqldialect.SQLite:   "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE ?",
}

// While another session holds the lock, Run waits (here until its context
// ends) and applies nothing; once the lock is free it runs. This is what
// proves Run takes the lock it is configured with.
func TestRunWaitsForTheLock(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := b.open(t)
			table := testenv.Name("wait")
			ms, c := testMigrations(t, table), testConfig(b.dialect, table)
			holder, err := db.Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer holder.Close()
			var lock, unlock string
			switch b.dialect {
			case sqldialect.Postgres:
				lock, unlock = "SELECT pg_advisory_lock("+c.LockKey+")", "SELECT pg_advisory_unlock("+c.LockKey+")"
			case sqldialect.MySQL:
				lock, unlock = "SELECT GET_LOCK("+c.LockKey+", 10)", "SELECT RELEASE_LOCK("+c.LockKey+")"
			default:
				lock, unlock = "BEGIN IMMEDIATE", "ROLLBACK"
			}
			args := func() []any {
				if b.dialect == sqldialect.SQLite {
					return nil
				}
				return []any{c.LockArg}
			}
			if _, err := holder.ExecContext(t.Context(), lock, args()...); err != nil {
				t.Fatal(err)
			}
			runner := db
			if b.dialect == sqldialect.SQLite {
				// A short busy_timeout: SQLite waits for its write lock
				// there, not on the context.
				runner = openPool(t, "sqlite", strings.Replace(dsn, "busy_timeout(10000)", "busy_timeout(200)", 1))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
			defer cancel()
			if err := sqlmigrate.Run(ctx, runner, ms, c); err == nil {
				t.Fatal("Run succeeded while another session held the lock")
			}
			if _, err := holder.ExecContext(t.Context(), unlock, args()...); err != nil {
				t.Fatal(err)
			}
			var exists int
			if err := db.QueryRowContext(t.Context(), tablesLike[b.dialect], table+"%").Scan(&exists); err != nil || exists != 0 {
				t.Errorf("%d tables named %s* after the blocked Run, %v; want 0", exists, table, err)
			}
			if err := sqlmigrate.Run(t.Context(), runner, ms, c); err != nil {
				t.Fatalf("Run after the lock was released: %v", err)
			}
			if got := count(t, db, c.VersionTable); got != 3 {
				t.Errorf("%d versions recorded, want 3", got)
			}
		})
	}
}

// A MySQL run whose session dies after some DDL (here: the server kills
// it, as it does a dead process's) leaves that DDL committed and its
// version unrecorded. The next Run of the same release finishes the file:
// the CREATE TABLE, ADD COLUMN and CREATE INDEX it repeats count as done
// (MySQL has no ADD COLUMN IF NOT EXISTS), and the version is recorded.
func TestRunFinishesAfterAKilledMySQLSession(t *testing.T) {
	t.Parallel()
	db, dsn := testenv.MySQLDB(t)
	table := testenv.Name("kill")
	gate := table + "_gate"
	c := testConfig(sqldialect.MySQL, table)
	fsys := fstest.MapFS{"001_partial.sql": {Data: []byte(
		"CREATE TABLE {{table}} (id INTEGER NOT NULL PRIMARY KEY);\n" +
			"ALTER TABLE {{table}} ADD COLUMN c INTEGER NOT NULL DEFAULT 0;\n" +
			"CREATE INDEX {{table}}_c ON {{table}} (c);\n" +
			"DO GET_LOCK('{{gate}}', 60), RELEASE_LOCK('{{gate}}');\n",
	)}}
	ms, err := sqlmigrate.Load(fsys, ".", strings.NewReplacer("{{table}}", table, "{{gate}}", gate))
	if err != nil {
		t.Fatal(err)
	}
	holder, err := db.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(t.Context(), "DO GET_LOCK(?, 10)", gate); err != nil {
		t.Fatal(err)
	}
	runner := openPool(t, "mysql", dsn)
	done := make(chan error, 1)
	go func() { done <- sqlmigrate.Run(t.Context(), runner, ms, c) }()

	// The runner waits at the gate with the three DDL statements applied:
	// kill its session.
	var id int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := db.QueryRowContext(t.Context(),
			"SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND ID <> CONNECTION_ID()",
			"DO GET_LOCK('"+gate+"'%").Scan(&id)
		if err == nil {
			break
		}
		if !errors.Is(err, sql.ErrNoRows) || time.Now().After(deadline) {
			t.Fatalf("the runner never reached the gate: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := db.ExecContext(t.Context(), "KILL CONNECTION "+strconv.FormatInt(id, 10)); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err == nil {
		t.Fatal("Run succeeded although its session was killed")
	}
	if got := count(t, db, c.VersionTable); got != 0 {
		t.Fatalf("%d versions recorded by the killed run, want 0", got)
	}
	var cols int
	if err := db.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = DATABASE() AND table_name = ?", table).Scan(&cols); err != nil || cols != 2 {
		t.Fatalf("the killed run left %d columns in %s (%v), want 2: its DDL committed", cols, table, err)
	}
	if _, err := holder.ExecContext(t.Context(), "DO RELEASE_LOCK(?)", gate); err != nil {
		t.Fatal(err)
	}

	if err := sqlmigrate.Run(t.Context(), runner, ms, c); err != nil {
		t.Fatalf("Run after the killed run: %v", err)
	}
	if got := count(t, db, c.VersionTable); got != 1 {
		t.Errorf("%d versions recorded, want 1", got)
	}
	if _, err := db.ExecContext(t.Context(), "INSERT INTO "+table+" (id, c) VALUES (1, 2)"); err != nil {
		t.Errorf("the finished schema: %v", err)
	}
	// Only "it exists" is forgiven: another failure still fails the run.
	bad := []sqlmigrate.Migration{{Version: 2, File: "002_bad.sql", SQL: "ALTER TABLE " + table + " ADD COLUMN c INTEGER NOT NULL;\nALTER TABLE " + table + "_nowhere ADD COLUMN d INTEGER;\n"}}
	if err := sqlmigrate.Run(t.Context(), runner, bad, c); err == nil || !strings.Contains(err.Error(), "002_bad.sql") {
		t.Errorf("Run of a migration on a missing table = %v, want an error naming 002_bad.sql", err)
	}
}
