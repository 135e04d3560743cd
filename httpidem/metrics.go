package httpidem

// Decision is what the middleware made of a protected request: the label
// of idem_http_requests_total{outcome} (promidem), of the OpenTelemetry
// attribute idem.outcome (otelidem) and of the decision log line. Its
// String is that label.
//
// The type is not called Outcome because OutcomeUnknown already names the
// function a handler calls; DecisionOutcomeUnknown keeps the label's
// words.
type Decision uint8

// Decisions. Every protected request gets exactly one final decision;
// a request whose claim is granted gets DecisionAcquired first, then one
// of DecisionExecuted, DecisionReleased, DecisionOutcomeUnknown,
// DecisionStoreError or (the store failed after the client left)
// DecisionCanceled.
const (
	DecisionExecuted       Decision = iota + 1 // handler ran, response stored
	DecisionReleased                           // handler ran, status not stored (5xx, 408…), NotSent or panic: claim released
	DecisionReplayed                           // stored response replayed
	DecisionInFlight                           // 409: first request still running
	DecisionMismatch                           // 422: key reused with another request
	DecisionRejected                           // 400/413: bad key, scope or body
	DecisionStoreError                         // 503/500: store failed
	DecisionKeyless                            // protected method without a key, passed through
	DecisionNotReplayable                      // 410: completed, response not stored
	DecisionFailOpen                           // store failed, handler ran unprotected (FailOpen)
	DecisionCanceled                           // client went away before a decision
	DecisionOutcomeUnknown                     // outcome unknown: held (stored) or released per UnknownOutcome
	DecisionSkipped                            // exempted from protection by a per-request skip rule, passed through
	// DecisionAcquired is not final: the store granted the claim and the
	// handler is about to run. It is reported to Observer.Decided but not
	// counted as a request (Final is false).
	DecisionAcquired
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"invalid", "executed", "released", "replayed", "in_flight", "mismatch",
	"rejected", "store_error", "keyless", "not_replayable", "fail_open",
	"canceled", "outcome_unknown", "skipped", "acquired",
}

func (d Decision) String() string {
	if d >= numOutcomes {
		return "invalid"
	}
	return outcomeNames[d]
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

// The middleware's own short names for the decisions.
type outcome = Decision

const (
	outcomeExecuted      = DecisionExecuted
	outcomeReleased      = DecisionReleased
	outcomeReplayed      = DecisionReplayed
	outcomeInFlight      = DecisionInFlight
	outcomeMismatch      = DecisionMismatch
	outcomeRejected      = DecisionRejected
	outcomeStoreError    = DecisionStoreError
	outcomeKeyless       = DecisionKeyless
	outcomeNotReplayable = DecisionNotReplayable
	outcomeFailOpen      = DecisionFailOpen
	outcomeCanceled      = DecisionCanceled
	outcomeUnknown       = DecisionOutcomeUnknown
	outcomeSkipped       = DecisionSkipped
)

// StoreOp names a store call the middleware makes: the label of
// idem_http_store_duration_seconds{op}. Its String is that label.
type StoreOp uint8

// Store operations.
const (
	OpBegin       StoreOp = iota // Store.Begin (each poll too, with WaitTimeout)
	OpComplete                   // Store.Complete
	OpRelease                    // Store.Release
	OpMarkStarted                // Store.MarkStarted (AtMostOnce)
	numOps
)

var opNames = [numOps]string{"begin", "complete", "release", "mark_started"}

func (o StoreOp) String() string {
	if o >= numOps {
		return "invalid"
	}
	return opNames[o]
}

// StoreOps returns every store operation, in order: the label values of a
// store latency histogram.
func StoreOps() []StoreOp {
	out := make([]StoreOp, 0, numOps)
	for o := range numOps {
		out = append(out, o)
	}
	return out
}
