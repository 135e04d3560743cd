package locktest_test

import (
	"database/sql"
	"testing"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/locktest"
	"github.com/idemkit/idem/lock/pglock"
)

// A Locker proves itself by running the suite from a test of its own, on
// a lock space per test. This is the shape of pglock's: each test gets its
// own Namespace on a PostgreSQL database (db, opened by the caller with a
// driver, so the suite needs a server: not run here).
func ExampleRun() {
	conformance := func(t *testing.T, db *sql.DB, namespace func(t *testing.T) string) {
		locktest.Run(t, func(t *testing.T) lock.Locker {
			l, err := pglock.New(db, &pglock.Config{Namespace: namespace(t)})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Migrate(t.Context()); err != nil {
				t.Fatal(err)
			}
			return l
		})
	}
	_ = conformance // func TestConformance(t *testing.T) { conformance(t, db, freshNamespace) }
}
