// Package idemtest is the conformance suite every idem.Store runs against its
// real server. It is exported so that a third-party store can prove itself
// with the same tests:
//
//	func TestConformance(t *testing.T) {
//		idemtest.RunStore(t, idemtest.Harness{
//			New: func(t *testing.T) idem.Store { return newIsolatedStore(t) },
//			Unreachable: func(t *testing.T) idem.Store { return storeOnClosedPort(t) },
//		})
//	}
//
// The suite checks the semantics table of idem.Store.Begin, ownership
// (Complete, Release and Extend by a stale or forged owner change nothing),
// takeover after lease expiry with growing fences, retention, Purge racing
// re-inserts, scope isolation, 8 MiB results, context cancellation and
// unreachable servers, and 200 goroutines racing for one key.
//
// Expiry cases use leases of a few hundred milliseconds and poll for the
// expected state with a generous deadline, so they hold on a loaded machine;
// no case asserts how long anything took.
package idemtest
