package testenv

import (
	"database/sql"
	"testing"

	"github.com/idemkit/idem/internal/sqldialect"
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

// DriverName is the database/sql driver this package registers for d:
// "pgx", "mysql" or "sqlite".
func DriverName(d sqldialect.Dialect) string {
	switch d {
	case sqldialect.Postgres:
		return "pgx"
	case sqldialect.MySQL:
		return "mysql"
	default:
		return "sqlite"
	}
}

// DialectDB opens a private database of dialect d: a fresh PostgreSQL schema
// (PostgresDB), a fresh MySQL database (MySQLDB) or a new SQLite file in WAL
// mode with a 10 s busy timeout. dsn, opened with DriverName(d), reaches the
// same database, e.g. from a child process.
func DialectDB(tb testing.TB, d sqldialect.Dialect) (db *sql.DB, dsn string) {
	tb.Helper()
	switch d {
	case sqldialect.Postgres:
		return PostgresDB(tb)
	case sqldialect.MySQL:
		return MySQLDB(tb)
	case sqldialect.SQLite:
		dsn = "file:" + SQLitePath(tb) + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)"
		db, err := sql.Open("sqlite", dsn)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { db.Close() })
		return db, dsn
	}
	tb.Fatalf("testenv: no database for dialect %v", d)
	return nil, ""
}
