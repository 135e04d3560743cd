package sqlstore_test

import (
	"net/url"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/sqlstore"
)

// The conformance suite on connections whose transactions default to
// REPEATABLE READ (a setting some PostgreSQL deployments choose). Racing
// statements then fail with serialization failures (40001) or deadlocks
// (40P01) where READ COMMITTED would re-check the row; the store retries
// them itself, so contention never surfaces as "unavailable".
func TestConformanceRepeatableRead(t *testing.T) {
	t.Parallel()
	b := backends[0]
	_, dsn := b.open(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_transaction_isolation", "repeatable read") // a run-time parameter of the session
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20")   // pgx does not read + as a space
	db, _ := limit(openDSN(t, "pgx", u.String()), "")
	var level string
	if err := db.QueryRowContext(ctxT(t), "SHOW transaction_isolation").Scan(&level); err != nil || level != "repeatable read" {
		t.Fatalf("session isolation = %q, %v; want repeatable read", level, err)
	}
	idemtest.RunStore(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store { return newStore(t, b, db) },
	})
	_ = sqlstore.Postgres
}
