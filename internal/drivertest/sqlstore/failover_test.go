package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// pairStore opens a migrated Store on the pair's primary, through the
// clients' forwarder, so that the same Store follows each failover.
func pairStore(t *testing.T, pair *testenv.PGPair, dsn string, cfg sqlstore.Config) (*sqlstore.Store, *sql.DB) {
	t.Helper()
	db := openDSN(t, "pgx", dsn)
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	cfg.Dialect = sqlstore.Postgres
	if cfg.Table == "" {
		cfg.Table = testenv.Name("idem")
	}
	s, err := sqlstore.New(db, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s, db
}

// answers waits until the store answers a read again.
func answers(t *testing.T, s idem.Store) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.Get(ctx, idem.MustKey("failover", "probe"))
		cancel()
		if errors.Is(err, idem.ErrNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store does not answer after the failover: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A PostgreSQL primary with a synchronous standby, failed over three times
// (the standby cut off for a moment, the primary's processes SIGKILLed,
// the standby promoted, the clients switched, a new standby attached):
// no result a caller was given is lost, no key runs twice, with and
// without AtMostOnce.
func TestFailoverPostgresSynchronous(t *testing.T) {
	t.Parallel()
	for _, amo := range []bool{false, true} {
		name := "Plain"
		if amo {
			name = "AtMostOnce"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pair := testenv.StartPGPair(t, testenv.PGPairOptions{})
			s, _ := pairStore(t, pair, pair.DSN(), sqlstore.Config{})
			rep, err := s.Replication(ctxT(t))
			if err != nil || rep.Mode != idem.ReplicationSynchronous || rep.Replicas != 1 || rep.Waits != 1 {
				t.Fatalf("Replication = %+v, %v; want synchronous with 1 standby waited for", rep, err)
			}
			idemtest.RunFailover(t, idemtest.FailoverTopology{
				Store: s,
				Failover: func(t *testing.T) {
					pair.Failover(t)
					answers(t, s)
				},
			}, idemtest.FailoverOptions{Failovers: 3, AtMostOnce: amo})
		})
	}
}
