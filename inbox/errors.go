package inbox

import "errors"

var (
	// ErrInvalidID is returned for an empty or over-long consumer name, or an
	// empty message ID. Nothing was written.
	ErrInvalidID = errors.New("inbox: invalid id")
	// ErrInvalidName is returned by New for a table or column name that is not
	// a plain SQL identifier.
	ErrInvalidName = errors.New("inbox: invalid SQL name")
	// ErrInvalidConfig is returned by New and NewSweeper for a bad Config.
	ErrInvalidConfig = errors.New("inbox: invalid config")
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
