package observe

import "github.com/idemkit/idem"

// Protocol is the adapter an event comes from: the label (or the metric
// family) promidem and otelidem count it under.
type Protocol uint8

// Protocols.
const (
	ProtocolHTTP    Protocol = iota + 1 // httpidem's middleware (and idem proxy, ginidem, echoidem)
	ProtocolGRPC                        // grpcidem's interceptor
	ProtocolConnect                     // connectidem's interceptor
	numProtocols
)

var protocolNames = [numProtocols]string{"invalid", "http", "grpc", "connect"}

// String returns "http", "grpc" or "connect".
func (p Protocol) String() string {
	if p >= numProtocols {
		return "invalid"
	}
	return protocolNames[p]
}

// IsRPC reports whether p is gRPC or Connect: Event.Status is then an RPC
// status code, not an HTTP status.
func (p Protocol) IsRPC() bool { return p == ProtocolGRPC || p == ProtocolConnect }

// Protocols returns every protocol, in order.
func Protocols() []Protocol {
	out := make([]Protocol, 0, numProtocols-1)
	for p := ProtocolHTTP; p < numProtocols; p++ {
		out = append(out, p)
	}
	return out
}

// Decision is what an adapter made of a protected request: the outcome
// label of promidem's request counters, of the OpenTelemetry attribute
// idem.outcome (otelidem) and of the decision log line. Its String is that
// label.
//
// The type is not called Outcome because idem.Outcome already names what
// Store.Begin decided, and httpidem.OutcomeUnknown the function a handler
// calls; DecisionOutcomeUnknown keeps the label's words.
type Decision uint8

// Decisions. Every protected request gets exactly one final decision;
// a request whose claim is granted gets DecisionAcquired first, then one
// of DecisionExecuted, DecisionReleased, DecisionOutcomeUnknown,
// DecisionNotReplayable, DecisionStoreError or (the store failed after the
// caller left) DecisionCanceled. The answers in the comments are HTTP's;
// the RPC adapters answer with the matching status codes.
const (
	DecisionExecuted       Decision = iota + 1 // work ran, result stored
	DecisionReleased                           // work ran, result not stored (5xx, 408…), NotSent, error or panic: claim released
	DecisionReplayed                           // stored result replayed
	DecisionInFlight                           // 409: first request still running
	DecisionMismatch                           // 422: key reused with another request
	DecisionRejected                           // 400/413: bad key, scope or body
	DecisionStoreError                         // 503/500: store failed
	DecisionKeyless                            // protected method without a key, passed through
	DecisionNotReplayable                      // 410: completed, result not stored
	DecisionFailOpen                           // store failed, work ran unprotected (httpidem's FailOpen)
	DecisionCanceled                           // caller went away before a decision
	DecisionOutcomeUnknown                     // outcome unknown: held (stored) or released per the adapter's policy
	DecisionSkipped                            // exempted from protection by a per-request skip rule, passed through
	// DecisionAcquired is not final: the store granted the claim and the
	// work is about to run. It is reported to Observer.Decided but not
	// counted as a request (Final is false).
	DecisionAcquired
	numDecisions
)

var decisionNames = [numDecisions]string{
	"invalid", "executed", "released", "replayed", "in_flight", "mismatch",
	"rejected", "store_error", "keyless", "not_replayable", "fail_open",
	"canceled", "outcome_unknown", "skipped", "acquired",
}

func (d Decision) String() string {
	if d >= numDecisions {
		return "invalid"
	}
	return decisionNames[d]
}

// Final reports whether d is a request's last decision, the one that is
// counted; only DecisionAcquired (and an invalid value) is not.
func (d Decision) Final() bool { return d >= DecisionExecuted && d < DecisionAcquired }

// FinalDecisions returns every final decision, in order: the label values
// of a requests counter.
func FinalDecisions() []Decision {
	out := make([]Decision, 0, DecisionAcquired-DecisionExecuted)
	for d := DecisionExecuted; d < DecisionAcquired; d++ {
		out = append(out, d)
	}
	return out
}

// StoreOps returns every store method an adapter calls, in order: the
// label values (their String) of a store latency histogram.
func StoreOps() []idem.StoreMethod {
	return []idem.StoreMethod{idem.MethodBegin, idem.MethodComplete, idem.MethodRelease, idem.MethodMarkStarted}
}
