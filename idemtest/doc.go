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
// # Sections
//
// RunStore checks the semantics table of idem.Store.Begin, ownership
// (Complete, Hold, Release, Extend and MarkStarted by a stale or forged
// owner change nothing), the held state (Hold keeps StateHeld whatever the
// result, the owner's first finishing call wins, also when its Hold and
// Complete race, and an expired held key is acquired afresh), takeover after lease expiry with growing fences,
// leases, retentions and Extends of up to math.MaxInt64 nanoseconds (one
// owner, a record that never looks expired: no clock arithmetic wraps), the
// started mark (kept across takeovers, cleared by Release and by a fresh
// acquisition, consistent when MarkStarted races a takeover), retention,
// Purge racing re-inserts, scope isolation, 8 MiB results, context
// cancellation and unreachable servers, and 200 goroutines racing for one
// key.
//
// RunFaults runs a store through a TCP fault proxy (package
// idemtest/faultproxy) in front of its real server: a reply lost after the
// command ran, every reply dropped for a while, a black-holed connection, a holder partitioned from the store
// while another caller retries, a reset in mid-reply and, when the harness
// can restart a private server, a server restart. It asserts never two live
// owners, no lost completed result, unavailable errors rather than hangs,
// and no key held longer than one lease by a claim whose owner never learnt
// it had it. It applies to stores that talk to a server over TCP; an
// in-process map or an SQLite file has no network for the proxy to cut.
//
// RunFailover runs a stream of idem.Do calls on fresh keys through
// failovers of a replicated server (the topology kills the primary,
// promotes a standby and switches the clients), then retries every key: a
// result a caller was given and a retry did not replay is lost, and a key
// whose work ran again ran twice. Both must be zero; on a synchronously
// replicated server they are (docs/replication.md).
//
// # Timing
//
// Expiry cases use leases of a few hundred milliseconds (fault cases: a few
// seconds, longer than an operation's deadline) and poll for the expected
// state with a generous deadline, so they hold on a loaded machine; no case
// asserts how long anything took, except that an operation under a fault
// returns at most ten seconds past its own context's deadline (a hang).
package idemtest
