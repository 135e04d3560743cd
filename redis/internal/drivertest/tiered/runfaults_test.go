package tiered_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/sqlstore"
	"github.com/idemkit/idem/tiered"
)

// TestFaults runs the shared fault suite with the faults on the link to
// the judge: PostgreSQL through the TCP fault proxy, Redis in front of it
// untouched. A tiered store must keep every invariant of the suite as the
// durable store alone does (a replay Redis holds may still be answered
// during the fault: that is the fast path working).
//
// Faults on the link to Redis are tested in fault_test.go
// (TestFastFaultsFallThrough, TestLostFastReplyResent): the suite's
// partitioned-holder and black-hole cases assume that the proxied link is
// the store's judge, which Redis in front of a durable store is not (a
// holder cut off from Redis still renews its lease with PostgreSQL).
func TestFaults(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.PostgresDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	idemtest.RunFaults(t, idemtest.FaultHarness{
		Target: u.Host,
		New: func(t *testing.T) func(addr string) idem.Store {
			table := testenv.Name("idem_f")
			prefix := testenv.Name("idemf") + ":"
			migrated := false
			return func(addr string) idem.Store {
				cfg, err := pgx.ParseConfig(testenv.Redirect(dsn, addr))
				if err != nil {
					t.Fatal(err)
				}
				db := stdlib.OpenDB(*cfg)
				db.SetMaxIdleConns(16)
				t.Cleanup(func() { db.Close() })
				durable, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres, Table: table})
				if err != nil {
					t.Fatal(err)
				}
				if !migrated {
					if err := durable.Migrate(ctxT(t)); err != nil {
						t.Fatal(err)
					}
					migrated = true
				}
				// Results over 128 KiB are not cached in Redis: the suite's
				// 256 KiB replays then come from PostgreSQL, through the
				// proxy, where its reset in mid-reply is aimed.
				fast := fastOn(t, sharedClient(t), &redisstore.Config{Prefix: prefix, MaxResult: 128 << 10})
				return newTiered(t, fast, durable, &tiered.Config{FastTimeout: 2 * time.Second})
			}
		},
	})
}
