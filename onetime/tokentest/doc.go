// Package tokentest is the conformance suite every onetime.Store runs
// against its real server:
//
//	func TestConformance(t *testing.T) {
//		tokentest.Run(t, tokentest.Harness{
//			New:         func(t *testing.T, retain time.Duration) onetime.Store { … },
//			Unreachable: func(t *testing.T) onetime.Store { … },
//		})
//	}
//
// It checks the decision table of Store.Consume (unknown, foreign scope,
// used, expired, in that order), that of N concurrent consumers exactly one
// wins, re-takes by the same Use with growing fences, Restore's ownership,
// retention, TTLs and retentions of up to math.MaxInt64 nanoseconds (far
// future, never wrapped into the past), cancellation and unreachable
// servers.
//
// Expiry cases wait at least a token's TTL (by this process's clock, on the
// same machine as the server) and then assert the outcome; no case asserts
// how long anything took.
package tokentest
