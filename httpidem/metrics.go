package httpidem

import "github.com/idemkit/idem/observe"

// The middleware's own short names for the decisions.
type outcome = observe.Decision

const (
	outcomeExecuted      = observe.DecisionExecuted
	outcomeReleased      = observe.DecisionReleased
	outcomeReplayed      = observe.DecisionReplayed
	outcomeInFlight      = observe.DecisionInFlight
	outcomeMismatch      = observe.DecisionMismatch
	outcomeRejected      = observe.DecisionRejected
	outcomeStoreError    = observe.DecisionStoreError
	outcomeKeyless       = observe.DecisionKeyless
	outcomeNotReplayable = observe.DecisionNotReplayable
	outcomeFailOpen      = observe.DecisionFailOpen
	outcomeCanceled      = observe.DecisionCanceled
	outcomeUnknown       = observe.DecisionOutcomeUnknown
	outcomeSkipped       = observe.DecisionSkipped
)
