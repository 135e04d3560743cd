package sqlstore_test

import (
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
			if applied != 1 {
				t.Errorf("%d migrations recorded, want 1", applied)
			}
			var tables int
			if err := db.QueryRowContext(ctxT(t), tablesQuery[b.dialect], table+"%").Scan(&tables); err != nil {
				t.Fatal(err)
			}
			if tables != 2 {
				t.Errorf("%d tables named %s*, want 2 (records and migrations)", tables, table)
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
