package sqlstore_test

import (
	"fmt"
	"regexp"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// Eight processes' worth of pools run Migrate on a fresh schema at once:
// none fails, the schema is applied once, and the table works.
func TestMigrateConcurrently(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := b.open(t)
			table := testenv.Name("mig")
			const n = 8
			var wg sync.WaitGroup
			errs := make(chan error, n)
			start := make(chan struct{})
			for range n {
				pool := openDSN(t, b.driver, dsn) // one pool each, like separate processes
				s, err := sqlstore.New(pool, &sqlstore.Config{Dialect: b.dialect, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					errs <- s.Migrate(ctxT(t))
				}()
			}
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Errorf("concurrent Migrate: %v", err)
				}
			}
			var applied int
			if err := db.QueryRowContext(ctxT(t), "SELECT count(*) FROM "+table+"_migrations").Scan(&applied); err != nil {
				t.Fatal(err)
			}
			if want := migrations(t, b.dialect); applied != want {
				t.Errorf("%d migrations recorded, want %d", applied, want)
			}
			var tables int
			if err := db.QueryRowContext(ctxT(t), tablesQuery[b.dialect], table+"%").Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables != 3 {
				t.Errorf("%d tables named %s*, want 3 (records, migrations and steps)", tables, table)
			}
			// Running it again is a no-op, and the table works.
			s, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Migrate(ctxT(t)); err != nil {
				t.Fatalf("second Migrate: %v", err)
			}
			c, err := s.Begin(ctxT(t), idem.BeginRequest{Key: idem.MustKey("", "after-migrate")})
			if err != nil || c.Outcome != idem.Acquired {
				t.Fatalf("Begin after Migrate = %v, %v", c.Outcome, err)
			}
		})
	}
}

var tablesQuery = map[sqlstore.Dialect]string{
	sqlstore.Postgres: "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name LIKE $1",
	sqlstore.MySQL:    "SELECT count(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name LIKE ?",
	sqlstore.SQLite:   "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE ?",
}

// A table created by release 1 (before MarkStarted) is upgraded in place:
// its records stay readable, claims in progress keep working, and the new
// mark works on them.
func TestMigrateUpgradesVersion1(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			s, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: testenv.Name("up")})
			if err != nil {
				t.Fatal(err)
			}
			if err := migrateTo(ctxT(t), s, 1); err != nil {
				t.Fatalf("migrate to version 1: %v", err)
			}
			done, inflight := idem.MustKey("", "done"), idem.MustKey("", "inflight")
			// A record as release 1 wrote it, without the started column.
			old := "INSERT INTO %s (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at) VALUES ($1, $2, $3, $4, 7, $5, 1, $6, 9000000000000000)"
			if b.dialect != sqlstore.Postgres {
				old = regexp.MustCompile(`\$[0-9]`).ReplaceAllString(old, "?")
			}
			tok := idem.NewToken()
			var zero idem.Fingerprint
			for _, r := range []struct {
				key    idem.Key
				state  int
				result []byte
				lease  int64
			}{{done, 2, []byte("v1 result"), 0}, {inflight, 1, nil, 8000000000000000}} {
				d := r.key.Digest()
				if _, err := db.ExecContext(ctxT(t), fmt.Sprintf(old, storeTable(s)), d[:], r.state, zero[:], tok[:], r.result, r.lease); err != nil {
					t.Fatalf("insert a version-1 record: %v", err)
				}
			}
			if err := s.Migrate(ctxT(t)); err != nil {
				t.Fatalf("upgrade: %v", err)
			}
			c, err := s.Begin(ctxT(t), idem.BeginRequest{Key: done})
			if err != nil || c.Outcome != idem.Replay || string(c.Result) != "v1 result" {
				t.Fatalf("version-1 completed record after upgrade: %v %q %v", c.Outcome, c.Result, err)
			}
			owner := idem.Owner{Key: inflight, Token: tok, Fence: 7}
			if rec, err := s.Get(ctxT(t), inflight); err != nil || rec.Started || rec.State != idem.StateInProgress {
				t.Fatalf("version-1 claim after upgrade: %+v, %v", rec, err)
			}
			if err := s.MarkStarted(ctxT(t), owner); err != nil {
				t.Fatalf("MarkStarted on a version-1 claim: %v", err)
			}
			if err := s.Complete(ctxT(t), owner, []byte("ok")); err != nil {
				t.Fatalf("Complete of a version-1 claim: %v", err)
			}
			if rec, err := s.Get(ctxT(t), inflight); err != nil || !rec.Started || rec.State != idem.StateCompleted {
				t.Fatalf("upgraded claim after MarkStarted and Complete: %+v, %v", rec, err)
			}
		})
	}
}
