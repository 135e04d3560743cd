package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		os.Exit(crashChild())
	}
	if os.Getenv(amoChildEnv) != "" {
		os.Exit(amoChild())
	}
	testenv.RaiseParallel(8) // the fault suite waits on leases and restarts
	goleak.VerifyTestMain(m)
}

// password is put in every DSN that points at a closed port; no error may
// ever contain it.
const password = "s3cret-Pa55word"

// backend is one database the store runs on.
type backend struct {
	name    string
	dialect sqlstore.Dialect
	// open returns an isolated database (schema, database or file) and a
	// DSN that reaches it, for code that opens its own pools.
	open func(t testing.TB) (*sql.DB, string)
	// driver is the database/sql driver name.
	driver string
	// closedPort returns a DSN, with a password, whose server does not
	// answer, and a short connect timeout.
	closedPort func(t testing.TB) string
}

var backends = []backend{
	{
		name: "Postgres", dialect: sqlstore.Postgres, driver: "pgx",
		open: func(t testing.TB) (*sql.DB, string) { return limit(testenv.PostgresDB(t)) },
		closedPort: func(t testing.TB) string {
			return fmt.Sprintf("postgres://postgres:%s@127.0.0.1:%d/test?sslmode=disable&connect_timeout=2", password, testenv.RefusedPort(t))
		},
	},
	{
		name: "MySQL", dialect: sqlstore.MySQL, driver: "mysql",
		open: func(t testing.TB) (*sql.DB, string) { return limit(testenv.MySQLDB(t)) },
		closedPort: func(t testing.TB) string {
			return fmt.Sprintf("root:%s@tcp(127.0.0.1:%d)/test?timeout=2s", password, testenv.RefusedPort(t))
		},
	},
	{
		name: "SQLite", dialect: sqlstore.SQLite, driver: "sqlite",
		open: func(t testing.TB) (*sql.DB, string) {
			dsn := sqlstore.SQLiteDSN(testenv.SQLitePath(t))
			db, err := sql.Open("sqlite", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db, dsn
		},
		closedPort: func(t testing.TB) string {
			// A file in a directory that does not exist cannot be opened.
			return sqlstore.SQLiteDSN(t.TempDir() + "/missing/dir/idem.db")
		},
	},
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newStore returns a migrated Store on a fresh table of db.
func newStore(t testing.TB, b backend, db *sql.DB) *sqlstore.Store {
	t.Helper()
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: testenv.Name("idem")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

// openDSN opens a pool on dsn, closed when the test ends.
func openDSN(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// limit caps a server pool well below the shared server's max_connections
// (other packages' tests run at the same time): a pool must always be
// smaller than what the server accepts, or bursts fail with "too many
// connections" instead of queueing in database/sql.
func limit(db *sql.DB, dsn string) (*sql.DB, string) {
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	return db, dsn
}
