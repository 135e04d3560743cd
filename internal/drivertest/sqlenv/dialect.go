package sqlenv

import (
	"database/sql"
	"testing"

	_ "github.com/go-sql-driver/mysql" // MySQL/MariaDB driver "mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // PostgreSQL driver "pgx"
	_ "modernc.org/sqlite"             // SQLite driver "sqlite"

	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/testenv"
)

// Dialects are the databases a dialect-generic test runs on.
var Dialects = []sqldialect.Dialect{sqldialect.Postgres, sqldialect.MySQL, sqldialect.SQLite}

// EachDialect runs fn as one parallel subtest per dialect, named after it
// ("postgres", "mysql", "sqlite").
func EachDialect(t *testing.T, fn func(t *testing.T, d sqldialect.Dialect)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// DialectDB opens a private database of dialect d: a fresh PostgreSQL schema
// (testenv.PostgresDB), a fresh MySQL database (testenv.MySQLDB) or a new
// SQLite file in WAL mode with a 10 s busy timeout. dsn, opened with
// testenv.DriverName(d), reaches the same database, e.g. from a child
// process.
func DialectDB(tb testing.TB, d sqldialect.Dialect) (db *sql.DB, dsn string) {
	tb.Helper()
	switch d {
	case sqldialect.Postgres:
		return testenv.PostgresDB(tb)
	case sqldialect.MySQL:
		return testenv.MySQLDB(tb)
	case sqldialect.SQLite:
		dsn = "file:" + testenv.SQLitePath(tb) + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { db.Close() })
		// One connection first: it switches the new file to WAL, and
		// connections opening the file during that switch get SQLITE_BUSY
		// without waiting (busy_timeout does not cover it).
		if err := db.Ping(); err != nil {
			tb.Fatal(err)
		}
		return db, dsn
	}
	tb.Fatalf("sqlenv: no database for dialect %v", d)
	return nil, ""
}
