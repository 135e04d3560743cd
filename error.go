package idem

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Decision errors. Match them with errors.Is.
var (
	// ErrInFlight: another caller holds a live claim on the key. The typed
	// form *InFlightError carries how long until its lease runs out.
	ErrInFlight = errors.New("idem: operation with this key is already in flight")
	// ErrMismatch: the key was already used for a different request.
	ErrMismatch = errors.New("idem: key reused with a different request")
	// ErrLeaseLost: the caller no longer owns the claim (it expired and was
	// taken over, or it was completed or released). Nothing was written.
	ErrLeaseLost = errors.New("idem: lease lost: the claim has another owner or none")
	// ErrNotFound: no record exists for the key.
	ErrNotFound = errors.New("idem: record not found")
	// ErrUnavailable: the store could not be reached or failed. The
	// operation's outcome is unknown to the store; retry later.
	ErrUnavailable = errors.New("idem: store unavailable")
	// ErrInvalidKey: the key is empty, too long or not visible ASCII.
	ErrInvalidKey = errors.New("idem: invalid key")
	// ErrResultTooLarge: the result exceeds the store's configured limit.
	ErrResultTooLarge = errors.New("idem: result too large")
	// ErrOutcomeUnknown: a previous holder of the key started the work
	// (Store.MarkStarted) and then lost its claim without a result, so the
	// work may or may not have had its effects. It is not run again; the
	// key is held (StateHeld) until an operator resolves it with Resolve
	// ('idem keys resolve' on the command line): the real result, or a
	// release so that the next call runs the work.
	ErrOutcomeUnknown = errors.New("idem: outcome unknown: the work was started by a holder that lost its claim")
	// ErrNotReplayable: the work ran, but its result could not be stored
	// (for example ErrResultTooLarge), so a retry can neither replay it nor
	// safely run it again.
	ErrNotReplayable = errors.New("idem: the operation ran but its result could not be stored for replay")
)

// InFlightError is the typed form of ErrInFlight.
type InFlightError struct {
	RetryAfter time.Duration
}

func (e *InFlightError) Error() string {
	return fmt.Sprintf("%v (retry after %v)", ErrInFlight, e.RetryAfter.Round(time.Millisecond))
}

// Is makes errors.Is(err, ErrInFlight) true.
func (e *InFlightError) Is(target error) bool { return target == ErrInFlight }

// KeyError explains why a key was rejected. It matches ErrInvalidKey.
type KeyError struct {
	Reason string
}

func (e *KeyError) Error() string { return "idem: invalid key: " + e.Reason }

// Is makes errors.Is(err, ErrInvalidKey) true.
func (e *KeyError) Is(target error) bool { return target == ErrInvalidKey }

// ConfigError reports a configuration value that can never work: a field
// of a Config, Options or request struct, or a required argument of a
// constructor or call (a nil *sql.DB, a nil handler). It is a programming
// or deployment error, not a transient one: fix the value, do not retry.
//
// Every package of this module reports bad configuration with a
// *ConfigError and in no other way; match it with errors.As. There are no
// per-package sentinels such as an ErrInvalidConfig: one type matched one
// way is simpler than a sentinel per package, each of which the type would
// have to know in an Is method.
//
// Package is the name of the package that rejected the value ("" for this
// root package), Field names the value as you write it in code
// ("Config.MaxFailures", "Options.Lease", "BeginRequest.Retention", or a
// parameter such as "handler"), and Reason says what is wrong with it. The
// text is always "<Package>: invalid <Field>: <Reason>", with "idem" for an
// empty Package:
//
//	amqpinbox: invalid Config.Prefetch: must be at least 1, got 0
//	idem: invalid BeginRequest.Lease: must be at least 1ms
//
// Reason never contains a password: a rejected DSN or URL is quoted with
// its password redacted.
type ConfigError struct {
	Package string
	Field   string
	Reason  string
}

func (e *ConfigError) Error() string {
	pkg := e.Package
	if pkg == "" {
		pkg = "idem"
	}
	return pkg + ": invalid " + e.Field + ": " + e.Reason
}

// unavailableError wraps a store failure so that it matches ErrUnavailable
// and still unwraps to the driver's error.
type unavailableError struct {
	op  string
	err error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("idem: store unavailable: %s: %v", e.op, e.err)
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// StoreError is the one wrapper of store failures: what a store returns
// for its failed I/O step op, whatever its engine.
//
//   - The caller stopped waiting (ctx has ended, or its deadline has
//     passed: a driver that sets the connection's deadline to ctx's can
//     fail a moment before ctx's own timer marks it done): ctx's error.
//   - Otherwise err wrapped so that IsUnavailable is true and it unwraps
//     to err. A context error the store made itself while the caller
//     still waits (a driver's connect or read timeout, which often wraps
//     context.DeadlineExceeded) keeps its text but no longer matches
//     context.Canceled or context.DeadlineExceeded, which say the caller
//     gave up: the store did not answer in time.
//
// An error that already is unavailable is returned as it is, and a nil
// err stays nil. A store that refuses without I/O (a replication verdict
// made ahead of any call) passes context.Background().
func StoreError(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	if cerr := stopped(ctx); cerr != nil {
		return cerr
	}
	if errors.Is(err, ErrUnavailable) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		err = &storeTimeout{err: err}
	}
	return &unavailableError{op: op, err: err}
}

// stopped returns ctx's error if ctx has ended or its deadline has passed
// (its timer may not have fired yet), and nil otherwise.
func stopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// storeTimeout carries the text of a context error raised inside a store's
// client while the caller's context was alive, without matching the
// context errors (it does not unwrap); errors.As still finds the client's
// own error types in it (a driver's SafeToRetry, a *net.OpError).
type storeTimeout struct{ err error }

func (e *storeTimeout) Error() string { return e.err.Error() }

// As finds target among the wrapped error's chain.
func (e *storeTimeout) As(target any) bool { return errors.As(e.err, target) }

// Timeout reports true, as net.Error's does.
func (e *storeTimeout) Timeout() bool { return true }

// IsUnavailable reports whether err means the store could not answer. The
// caller must not assume either outcome: fail closed (HTTP 503 with
// Retry-After) and let the client retry with the same key.
func IsUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
