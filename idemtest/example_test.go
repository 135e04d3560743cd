package idemtest_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

// A store proves itself by running the suite from a test of its own. This
// is memstore's; a store with a server also sets Harness.Unreachable.
func ExampleRunStore() {
	conformance := func(t *testing.T) {
		idemtest.RunStore(t, idemtest.Harness{
			New: func(t *testing.T) idem.Store {
				s := memstore.New(&memstore.Config{SweepInterval: -1})
				t.Cleanup(func() { s.Close() })
				return s
			},
		})
	}
	_ = conformance // func TestConformance(t *testing.T) { conformance(t) }
}
