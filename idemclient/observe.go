package idemclient

import (
	"context"
	"time"
)

// Observer watches a Transport's attempts, decisions and waits: for
// metrics, logs and traces. Set it as Config.Observer; nil observes
// nothing and costs nothing.
//
// Observe is called on the request's goroutine and must return quickly
// and be safe for concurrent use. ObserverFunc turns a function into one.
//
// (This is the client's own small type for now; when the neutral
// observation package lands, its types replace the parts they cover.)
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc is an Observer that calls f.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// EventKind says what an Event reports.
type EventKind uint8

const (
	// EventAttempt: one attempt ended (Status or Err), and Decision says
	// what the Transport does next.
	EventAttempt EventKind = iota + 1
	// EventWait: the Transport waits Duration before the next attempt.
	EventWait
)

func (k EventKind) String() string {
	switch k {
	case EventAttempt:
		return "attempt"
	case EventWait:
		return "wait"
	}
	return "invalid"
}

// Decision is what a Transport does after an attempt.
type Decision uint8

const (
	// DecisionDone: the answer is final and returned to the caller (a
	// success, a replay, a 4xx, a status that is not retried).
	DecisionDone Decision = iota + 1
	// DecisionRetry: another attempt follows, with the same key.
	DecisionRetry
	// DecisionGiveUp: the answer or error would be retried, but Reason
	// says why it is not (attempts, elapsed, budget, …); the caller gets
	// the last answer, a *RetryError or an *OutcomeUnknownError.
	DecisionGiveUp
	// DecisionOutcomeUnknown: the server answered outcome-unknown; the
	// caller gets an *OutcomeUnknownError.
	DecisionOutcomeUnknown
)

func (d Decision) String() string {
	switch d {
	case DecisionDone:
		return "done"
	case DecisionRetry:
		return "retry"
	case DecisionGiveUp:
		return "give_up"
	case DecisionOutcomeUnknown:
		return "outcome_unknown"
	}
	return "invalid"
}

// Reason names why an attempt is retried, or why retrying stopped.
type Reason string

// Reasons of an Event.
const (
	// Why an attempt is retried.
	ReasonTransport           Reason = "transport"            // a connection error, before or after the request was written
	ReasonAttemptTimeout      Reason = "attempt_timeout"      // no response headers within Config.AttemptTimeout
	ReasonInFlight            Reason = "in_flight"            // 409: the first attempt with this key is still running
	ReasonThrottled           Reason = "throttled"            // 429
	ReasonUnavailable         Reason = "unavailable"          // 503 (store-unavailable, result-not-stored, or any other)
	ReasonUpstreamUnreachable Reason = "upstream_unreachable" // 502 or 504 upstream-unreachable: nothing was sent

	// Why retrying stopped (DecisionGiveUp).
	ReasonAttempts     Reason = "attempts"      // Config.MaxAttempts
	ReasonElapsed      Reason = "elapsed"       // Config.MaxElapsed
	ReasonBudget       Reason = "budget"        // the retry budget is empty
	ReasonDeadline     Reason = "deadline"      // the context ended, or would before the next attempt
	ReasonRetryAfter   Reason = "retry_after"   // Retry-After above Config.MaxRetryAfter
	ReasonBody         Reason = "body"          // the body cannot be sent again
	ReasonNotRetryable Reason = "not_retryable" // an error no retry can fix (a TLS certificate)
)

// Event is one report of an Observer.
type Event struct {
	Kind   EventKind
	Method string
	Host   string
	// Key is the request's idempotency key, "" for an unkeyed request.
	// It is the caller's own key: log it where the caller would.
	Key string
	// Attempt is the number of the attempt that ended (EventAttempt) or
	// that follows the wait (EventWait), from 1.
	Attempt int
	// Status is the attempt's answer, 0 after a transport error.
	Status int
	// Replayed: the answer is a stored one (Idempotent-Replayed: true).
	Replayed bool
	// Err is the attempt's error, nil when it got an answer.
	Err error
	// Decision and Reason: for EventAttempt, what follows and why.
	Decision Decision
	Reason   Reason
	// Duration: for EventAttempt, how long the attempt took to its
	// response headers; for EventWait, the wait.
	Duration time.Duration
}
