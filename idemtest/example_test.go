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

// A store with a server also runs the fault suite. New prepares a fresh
// namespace and returns a function that opens stores on it reaching the
// server at any address: the suite passes its fault proxy's address, and
// the server's own for a client that the fault does not touch.
func ExampleRunFaults() {
	faults := func(t *testing.T, serverAddr string, newTable func(t *testing.T) string, openStore func(t *testing.T, addr, table string) idem.Store) {
		idemtest.RunFaults(t, idemtest.FaultHarness{
			Target: serverAddr,
			New: func(t *testing.T) func(addr string) idem.Store {
				table := newTable(t)
				return func(addr string) idem.Store { return openStore(t, addr, table) }
			},
		})
	}
	_ = faults // func TestFaults(t *testing.T) { faults(t, "127.0.0.1:5432", …) }
}
