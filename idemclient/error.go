package idemclient

import (
	"errors"
	"fmt"
)

// ErrOutcomeUnknown is matched (errors.Is) by every *OutcomeUnknownError.
var ErrOutcomeUnknown = errors.New("idemclient: outcome unknown")

// OutcomeUnknownError is the error of a keyed request whose outcome the
// client cannot know: the service may or may not have acted. It carries
// the key, so that the caller can look the operation up through the
// service (or an operator can resolve it with `idem keys`), then continue
// or knowingly start again with a new key. Retrying with the same key is
// allowed; against idem proxy in hold mode it replays the same answer.
//
// It is returned when
//
//   - the server answered 502 or 504 with the outcome-unknown problem type
//     (idem's servers: the request reached the service and no complete
//     answer came back). Status is 502 or 504; Replayed is true when that
//     answer is the key's stored result, replayed;
//   - the client gave up (attempts, elapsed time, retry budget, the
//     context, a Retry-After too long) after an attempt that may have
//     reached the service: a connection that broke after the request was
//     written, an attempt timeout, a 409 in-flight (the first attempt is
//     still running), a 503 result-not-stored. Status is the last answer's
//     status (409, 503), or 0 after a transport error.
//
// Err is why: the last attempt's error, or the reason the client stopped
// (errors.Is it against context.DeadlineExceeded, ErrBudgetExhausted, …).
type OutcomeUnknownError struct {
	Key      string
	Status   int
	Replayed bool
	Attempts int
	Err      error
}

func (e *OutcomeUnknownError) Error() string {
	s := fmt.Sprintf("idemclient: outcome unknown for key %q after %d attempt", e.Key, e.Attempts)
	if e.Attempts != 1 {
		s += "s"
	}
	if e.Status != 0 {
		s += fmt.Sprintf(" (last answer %d)", e.Status)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

// Unwrap returns Err.
func (e *OutcomeUnknownError) Unwrap() error { return e.Err }

// Why a Transport stopped retrying. A RetryError or an OutcomeUnknownError
// wraps one of these (or the context's error).
var (
	// ErrBudgetExhausted: the retry budget had no token left.
	ErrBudgetExhausted = errors.New("idemclient: retry budget exhausted")
	// ErrAttemptsExhausted: Config.MaxAttempts attempts were made.
	ErrAttemptsExhausted = errors.New("idemclient: attempts exhausted")
	// ErrElapsedExhausted: the next attempt would start after
	// Config.MaxElapsed.
	ErrElapsedExhausted = errors.New("idemclient: retry time exhausted")
	// ErrRetryAfterTooLong: the server asked for a wait longer than
	// Config.MaxRetryAfter.
	ErrRetryAfterTooLong = errors.New("idemclient: Retry-After too long")
	// ErrBodyNotReplayable: the request body had no GetBody and was
	// larger than Config.MaxBufferedBody, so it could be sent only once.
	ErrBodyNotReplayable = errors.New("idemclient: request body cannot be sent again")
	// ErrAttemptTimeout is the error of an attempt that ran past
	// Config.AttemptTimeout before its response headers arrived.
	ErrAttemptTimeout = errors.New("idemclient: attempt timed out")
)

// RetryError is the error of a request whose retries ended without an
// answer, when no attempt can have reached the service (connections
// refused, the service unreachable): nothing was executed, and the same
// request may be sent again later. Last is the last attempt's error; Stop
// is why no further attempt was made (ErrAttemptsExhausted, …, or the
// context's error). errors.Is matches both.
type RetryError struct {
	Key      string // "" for an unkeyed request
	Attempts int
	Stop     error
	Last     error
}

func (e *RetryError) Error() string {
	return fmt.Sprintf("idemclient: gave up after %d attempt%s (%v): %v", e.Attempts, plural(e.Attempts), e.Stop, e.Last)
}

// Unwrap returns Stop and Last.
func (e *RetryError) Unwrap() []error { return []error{e.Stop, e.Last} }

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
