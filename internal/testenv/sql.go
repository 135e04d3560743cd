package testenv

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqldialect"
)

// The SQL helpers open databases by driver name ("pgx", "mysql",
// "sqlite") and import no driver, so that this package needs only the
// standard library: the test binary registers the driver, by importing
// internal/drivertest/sqlenv (driver tests) or the driver itself (the
// cmd/idem module). Without it, sql.Open fails with "unknown driver".

// PostgresDB opens the test PostgreSQL in a fresh schema that is dropped when
// the test ends. It returns the pool and a DSN that selects the same schema
// (through search_path), for code under test that opens its own pool.
func PostgresDB(tb testing.TB) (*sql.DB, string) {
	tb.Helper()
	base := Postgres.Need(tb)
	admin, err := sql.Open("pgx", base)
	if err != nil {
		tb.Fatalf("open postgres: %v", err)
	}
	defer admin.Close()
	schema := Name("idem_t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+schema); err != nil {
		Unavailable(tb, "PostgreSQL", err)
	}
	dsn := withParam(base, "search_path", schema)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		tb.Fatalf("open postgres: %v", err)
	}
	tb.Cleanup(func() {
		db.Close()
		a, err := sql.Open("pgx", base)
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = a.ExecContext(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	})
	return db, dsn
}

// MySQLDB opens the test MariaDB/MySQL in a fresh database that is dropped when
// the test ends, and returns the pool and its go-sql-driver DSN.
func MySQLDB(tb testing.TB) (*sql.DB, string) {
	tb.Helper()
	base := MySQL.Need(tb)
	admin, err := sql.Open("mysql", base)
	if err != nil {
		tb.Fatalf("open mysql: %v", err)
	}
	defer admin.Close()
	name := Name("idem_t")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		Unavailable(tb, "MariaDB/MySQL", err)
	}
	dsn := replaceMySQLDB(base, name)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatalf("open mysql: %v", err)
	}
	tb.Cleanup(func() {
		db.Close()
		a, err := sql.Open("mysql", base)
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = a.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
	})
	return db, dsn
}

// SQLitePath returns a fresh database file path in the test's temp dir.
func SQLitePath(tb testing.TB) string {
	tb.Helper()
	return filepath.Join(tb.TempDir(), "idem.db")
}

func withParam(dsn, k, v string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.String()
}

// replaceMySQLDB swaps the database name in a go-sql-driver DSN
// (user:pass@tcp(host:port)/db?params).
func replaceMySQLDB(dsn, db string) string {
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		return dsn + "/" + db
	}
	rest := dsn[slash+1:]
	params := ""
	if q := strings.IndexByte(rest, '?'); q >= 0 {
		params = rest[q:]
	}
	return dsn[:slash+1] + db + params
}

// DriverName is the database/sql driver name registered for d: "pgx",
// "mysql" or "sqlite".
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
