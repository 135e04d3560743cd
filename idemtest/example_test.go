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

// A replicated store proves it keeps what it acknowledged across
// failovers. The topology opens the store once, through a forwarder whose
// target the failover switches to the promoted server; Failover cuts the
// standby off for a moment, kills the primary, promotes the standby,
// switches the forwarder and attaches a new standby. (This repository's
// PostgreSQL rig does this with private servers: sqlstore's failover tests
// in internal/drivertest.)
func ExampleRunFailover() {
	failover := func(t *testing.T, store idem.Store, failoverOnce func(t *testing.T)) {
		rep := idemtest.RunFailover(t, idemtest.FailoverTopology{
			Store:    store,        // opened once, through the switchable forwarder
			Failover: failoverOnce, // cut, SIGKILL, promote, switch, reattach
		}, idemtest.FailoverOptions{Failovers: 3, AtMostOnce: true})
		// RunFailover has already failed t if anything was lost or ran
		// twice; the counts are there for a benchmark or a log.
		_ = rep.Acknowledged
	}
	_ = failover // func TestFailover(t *testing.T) { failover(t, store, rig.Failover) }
}
