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
			db, _ := b.open(t)
			idemtest.RunStore(t, idemtest.Harness{
				New: func(t *testing.T) idem.Store { return newStore(t, b, db) },
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
