package inbox

import (
	"errors"

	"github.com/idemkit/idem"
)

var (
	// ErrInvalidID is returned for an empty or over-long consumer name, or an
	// empty message ID. Nothing was written.
	ErrInvalidID = errors.New("inbox: invalid id")
	// ErrHandler wraps every error a Handler returns: errors.Is(err,
	// ErrHandler) tells "the business code failed" from "the inbox could not
	// decide". A handler panic is not converted: the transaction is rolled
	// back and the panic propagates.
	ErrHandler = errors.New("inbox: handler failed")
	// ErrNotYet is for handlers (and packages such as watermark) to wrap
	// when a message arrived before the one it depends on: it cannot be
	// applied yet, and nothing is wrong with it. Process parks it — rolls
	// back, waits, runs it again (Config.EarlyRetries) — and then returns
	// the error, to be redelivered later, never dead-lettered as poison.
	ErrNotYet = errors.New("inbox: message cannot be applied yet")
	// ErrAlreadyStarted is returned by Sweeper.Start while it runs.
	ErrAlreadyStarted = errors.New("inbox: sweeper already started")
)

// handlerError wraps a Handler's error so that both errors.Is(err, ErrHandler)
// and errors.Is(err, theHandlersError) hold.
type handlerError struct{ err error }

func (e *handlerError) Error() string   { return "inbox: handler: " + e.err.Error() }
func (e *handlerError) Unwrap() []error { return []error{ErrHandler, e.err} }

// configError is the *idem.ConfigError of package inbox: New, NewSweeper and
// the Process methods (a nil handler or tx) report bad configuration with
// it, and in no other way.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "inbox", Field: field, Reason: reason}
}
