package sqlstore_test

import (
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	db := &sql.DB{} // New does no I/O, so an unopened pool is enough
	cases := []struct {
		name string
		cfg  *sqlstore.Config
		want string // substring of the error; "" means success
	}{
		{"bad dialect", &sqlstore.Config{Dialect: 9}, "Dialect"},
		{"defaults", &sqlstore.Config{Dialect: sqlstore.Postgres}, ""},
		{"table ok", &sqlstore.Config{Dialect: sqlstore.MySQL, Table: "App_idem_2"}, ""},
		{"table injection", &sqlstore.Config{Dialect: sqlstore.SQLite, Table: "x; DROP TABLE y"}, "Table"},
		{"table qualified", &sqlstore.Config{Dialect: sqlstore.Postgres, Table: "public.idem"}, "Table"},
		{"table digit first", &sqlstore.Config{Dialect: sqlstore.Postgres, Table: "1idem"}, "Table"},
		{"table too long", &sqlstore.Config{Dialect: sqlstore.Postgres, Table: strings.Repeat("t", 49)}, "Table"},
		{"negative max result", &sqlstore.Config{Dialect: sqlstore.Postgres, MaxResult: -1}, "MaxResult"},
	}
	for _, c := range cases {
		_, err := sqlstore.New(db, c.cfg)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: New = %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: New = %v, want an error about %s", c.name, err, c.want)
		}
	}
	if _, err := sqlstore.New(nil, &sqlstore.Config{Dialect: sqlstore.Postgres}); err == nil {
		t.Errorf("New(nil db) succeeded")
	}
}

// TestNilConfigIsDefaults: a nil *Config (or a zero Dialect) is the
// defaults, with the dialect of the pool's driver, on every database; a
// store made so works. An unknown driver is a configuration error.
func TestNilConfigIsDefaults(t *testing.T) {
	t.Parallel()
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			for _, cfg := range []*sqlstore.Config{nil, {Table: testenv.Name("nilcfg")}} {
				s, err := sqlstore.New(db, cfg)
				if err != nil {
					t.Fatalf("New(db, %+v): %v", cfg, err)
				}
				if got := storeTable(s); cfg == nil && got != sqlstore.DefaultTable {
					t.Errorf("New(db, nil) table %q, want %q", got, sqlstore.DefaultTable)
				}
				if cfg == nil {
					continue // the default table is shared by other tests' databases
				}
				ctx := ctxT(t)
				if err := s.Migrate(ctx); err != nil {
					t.Fatal(err)
				}
				key := idem.MustKey("", testenv.Name("nilcfg"))
				c, err := s.Begin(ctx, idem.BeginRequest{Key: key})
				if err != nil || c.Outcome != idem.Acquired {
					t.Fatalf("Begin = %+v, %v", c, err)
				}
				if err := s.Complete(ctx, c.Owner, []byte("r")); err != nil {
					t.Fatal(err)
				}
				if r, err := s.Begin(ctx, idem.BeginRequest{Key: key}); err != nil || r.Outcome != idem.Replay || string(r.Result) != "r" {
					t.Fatalf("replay = %+v, %v", r, err)
				}
			}
		})
	}
	_, err := sqlstore.New(configtest.NoDB(t), nil)
	configtest.Want(t, err, "sqlstore", "Config.Dialect")
}

func TestParseDialect(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]sqlstore.Dialect{"pgx": sqlstore.Postgres, "PostgreSQL": sqlstore.Postgres, "mariadb": sqlstore.MySQL, "mysql": sqlstore.MySQL, "sqlite": sqlstore.SQLite, "sqlite3": sqlstore.SQLite} {
		if got, err := sqlstore.ParseDialect(in); err != nil || got != want {
			t.Errorf("ParseDialect(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got, _ := sqlstore.ParseDialect(in); got.String() == "" {
			t.Errorf("empty String for %v", got)
		}
	}
	if _, err := sqlstore.ParseDialect("oracle"); err == nil {
		t.Errorf("ParseDialect(oracle) succeeded")
	}
}

// A result over MaxResult is refused before any I/O, and the claim stays
// the owner's.
func TestMaxResult(t *testing.T) {
	t.Parallel()
	b := backends[2] // SQLite: no server needed
	db, _ := b.open(t)
	s0 := newStore(t, b, db)
	s, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: storeTable(s0), MaxResult: 10})
	if err != nil {
		t.Fatal(err)
	}
	key := idem.MustKey("", "max-result")
	c, err := s.Begin(ctxT(t), idem.BeginRequest{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Complete(ctxT(t), c.Owner, make([]byte, 11)); !errors.Is(err, idem.ErrResultTooLarge) {
		t.Fatalf("Complete(11 bytes, limit 10) = %v, want ErrResultTooLarge", err)
	}
	if err := s.Complete(ctxT(t), c.Owner, make([]byte, 10)); err != nil {
		t.Fatalf("Complete(10 bytes) = %v", err)
	}
}

// No error of a store on an unreachable server, nor of Migrate, contains
// the DSN's password.
func TestPasswordNeverInErrors(t *testing.T) {
	for _, b := range backends[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s, err := sqlstore.New(openDSN(t, b.driver, b.closedPort(t)), &sqlstore.Config{Dialect: b.dialect})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			key := idem.MustKey("", "pw")
			owner := idem.Owner{Key: key, Token: idem.NewToken(), Fence: 1}
			_, beginErr := s.Begin(ctx, idem.BeginRequest{Key: key})
			_, getErr := s.Get(ctx, key)
			_, purgeErr := s.Purge(ctx, time.Hour, 10)
			errs := []error{beginErr, getErr, purgeErr, s.Migrate(ctx), s.Complete(ctx, owner, nil), s.Release(ctx, owner), s.Extend(ctx, owner, time.Second)}
			for i, err := range errs {
				if err == nil {
					t.Fatalf("operation %d on a closed port succeeded", i)
				}
				if strings.Contains(err.Error(), password) {
					t.Errorf("error leaks the password: %v", err)
				}
			}
		})
	}
}
