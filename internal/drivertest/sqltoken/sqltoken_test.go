package sqltoken_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
	"github.com/idemkit/idem/onetime/tokentest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backend opens an isolated database of one dialect.
type backend struct {
	name    string
	dialect sqltoken.Dialect
	open    func(t *testing.T) *sql.DB
	closed  func(t *testing.T) *sql.DB // a pool on a server that does not answer
}

func sqliteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)"
}

var backends = []backend{
	{
		name: "SQLite", dialect: sqltoken.SQLite,
		open: func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", sqliteDSN(testenv.SQLitePath(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			// One connection first: it switches the new file to WAL.
			// Connections opening the file during that switch get
			// SQLITE_BUSY without waiting (busy_timeout does not cover it).
			if err := db.Ping(); err != nil {
				t.Fatal(err)
			}
			return db
		},
		closed: func(t *testing.T) *sql.DB {
			db, err := sql.Open("sqlite", "file:/nonexistent-dir/idem/x.db?mode=rw")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
	},
	{
		name: "PostgreSQL", dialect: sqltoken.Postgres,
		open: func(t *testing.T) *sql.DB { db, _ := testenv.PostgresDB(t); return limitPool(db) },
		closed: func(t *testing.T) *sql.DB {
			db, err := sql.Open("pgx", fmt.Sprintf("postgres://postgres:s3cret-pw@127.0.0.1:%d/test?sslmode=disable&connect_timeout=1", testenv.RefusedPort(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
	},
	{
		name: "MariaDB", dialect: sqltoken.MySQL,
		open: func(t *testing.T) *sql.DB { db, _ := testenv.MySQLDB(t); return limitPool(db) },
		closed: func(t *testing.T) *sql.DB {
			db, err := sql.Open("mysql", fmt.Sprintf("root:s3cret-pw@tcp(127.0.0.1:%d)/test?timeout=1s", testenv.RefusedPort(t)))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			return db
		},
	},
}

// limitPool keeps the shared servers' connection limits (PostgreSQL: 100,
// shared by every package's tests) out of reach: 100 goroutines still race,
// through 8 connections per store.
func limitPool(db *sql.DB) *sql.DB {
	db.SetMaxOpenConns(8)
	return db
}

func newStore(t *testing.T, b backend) (*sqltoken.Store, *sql.DB) {
	t.Helper()
	db := b.open(t)
	s, err := sqltoken.New(db, &sqltoken.Config{Dialect: b.dialect, Table: testenv.Name("tok")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, db
}

func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			tokentest.Run(t, tokentest.Harness{
				New: func(t *testing.T, _ time.Duration) onetime.Store {
					s, _ := newStore(t, b)
					return s
				},
				Unreachable: func(t *testing.T) onetime.Store {
					s, err := sqltoken.New(b.closed(t), &sqltoken.Config{Dialect: b.dialect})
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
			})
		})
	}
}

// TestStoredHashed reads the table back: only digests, never the raw token
// or scope.
func TestStoredHashed(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s, db := newStore(t, b)
			tokens, err := onetime.New(s, nil)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const scope = "session:alice-7f3a"
			tok, err := tokens.Issue(ctx, scope)
			if err != nil {
				t.Fatal(err)
			}
			if err := tokens.Consume(ctx, scope, tok); err != nil {
				t.Fatal(err)
			}
			table := tableOf(t, db, b)
			rows, err := db.QueryContext(ctx, "SELECT token_hash, scope_hash, used_by FROM "+table)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			n := 0
			for rows.Next() {
				n++
				var th, sh, ub []byte
				if err := rows.Scan(&th, &sh, &ub); err != nil {
					t.Fatal(err)
				}
				td, sd := onetime.TokenDigest(tok), onetime.ScopeDigest(scope)
				if string(th) != string(td[:]) || string(sh) != string(sd[:]) {
					t.Fatalf("row holds %x / %x, want the digests %x / %x", th, sh, td, sd)
				}
				all := string(th) + string(sh) + string(ub)
				if strings.Contains(all, tok) || strings.Contains(all, scope) {
					t.Fatal("raw token or scope stored")
				}
			}
			if n != 1 {
				t.Fatalf("%d rows, want 1", n)
			}
		})
	}
}

// tableOf finds the token table created by newStore (its name is random).
func tableOf(t *testing.T, db *sql.DB, b backend) string {
	t.Helper()
	var q string
	switch b.dialect {
	case sqltoken.SQLite:
		q = `SELECT name FROM sqlite_master WHERE type='table' AND name LIKE 'tok_%' AND name NOT LIKE '%_migrations'`
	case sqltoken.Postgres:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE 'tok_%' AND table_name NOT LIKE '%_migrations'`
	default:
		q = `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE 'tok_%' AND table_name NOT LIKE '%_migrations'`
	}
	var name string
	if err := db.QueryRow(q).Scan(&name); err != nil {
		t.Fatalf("find table: %v", err)
	}
	return name
}

// TestMigrateConcurrently runs Migrate from 8 pools at once on a fresh
// database: no error, one table, version 1 recorded once.
func TestMigrateConcurrently(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db := b.open(t)
			table := testenv.Name("mig")
			var wg sync.WaitGroup
			errs := make([]error, 8)
			for i := range errs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					s, err := sqltoken.New(db, &sqltoken.Config{Dialect: b.dialect, Table: table})
					if err != nil {
						errs[i] = err
						return
					}
					errs[i] = s.Migrate(context.Background())
				}()
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("concurrent Migrate: %v", err)
			}
			var n int
			if err := db.QueryRow("SELECT COUNT(*) FROM " + table + "_migrations").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Fatalf("%d versions recorded, want 1", n)
			}
			if err := db.QueryRow("SELECT COUNT(*) FROM " + table).Scan(&n); err != nil {
				t.Fatalf("token table: %v", err)
			}
		})
	}
}

// TestNoPasswordInErrors: failing to reach a server whose DSN carries a
// password never prints the password.
func TestNoPasswordInErrors(t *testing.T) {
	for _, b := range backends[1:] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s, err := sqltoken.New(b.closed(t), &sqltoken.Config{Dialect: b.dialect})
			if err != nil {
				t.Fatal(err)
			}
			tokens, _ := onetime.New(s, nil)
			errs := []error{s.Migrate(context.Background())}
			_, err = tokens.Issue(context.Background(), "s")
			errs = append(errs, err)
			for _, err := range errs {
				if err == nil || !idem.IsUnavailable(err) {
					t.Fatalf("got %v, want an unavailable error", err)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Fatalf("password in error: %v", err)
				}
			}
		})
	}
}

func TestConfig(t *testing.T) {
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, c := range []*sqltoken.Config{nil, {}, {Dialect: 9}, {Dialect: sqltoken.SQLite, Table: "x; DROP TABLE y"}, {Dialect: sqltoken.SQLite, Table: "1abc"}} {
		if _, err := sqltoken.New(db, c); err == nil {
			t.Errorf("New(%+v) accepted an invalid config", c)
		}
	}
	if _, err := sqltoken.New(nil, &sqltoken.Config{Dialect: sqltoken.SQLite}); err == nil {
		t.Error("New(nil db) accepted")
	}
	if _, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.MySQL}); err != nil {
		t.Errorf("valid config refused: %v", err)
	}
}
