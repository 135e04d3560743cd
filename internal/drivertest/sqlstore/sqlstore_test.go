package sqlstore_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/sqlstore"
)

func TestConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			// Server databases are shared by the cases (one table each), so
			// the pools stay within the shared server's connection limit.
			// SQLite gets a file per case: a file has a single writer, and
			// parallel cases would only queue behind each other's fsyncs.
			db, _ := b.open(t)
			idemtest.RunStore(t, idemtest.Harness{
				New: func(t *testing.T) idem.Store {
					if b.dialect == sqlstore.SQLite {
						db, _ := b.open(t)
						return newStore(t, b, db)
					}
					return newStore(t, b, db)
				},
				Unreachable: func(t *testing.T) idem.Store {
					s, err := sqlstore.New(openDSN(t, b.driver, b.closedPort(t)), &sqlstore.Config{Dialect: b.dialect})
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
			})
		})
	}
}
