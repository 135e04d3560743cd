package fsm

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Fire's errors match them with errors.Is.
var (
	// ErrIllegalTransition: the row is in a state from which the transition
	// can neither run nor have already run. The concrete error is an
	// *IllegalTransitionError; Config.OnIllegalFunc has been called.
	ErrIllegalTransition = errors.New("fsm: illegal transition")

	// ErrStaleVersion: Options.Version was given, the row is still in a
	// source state, but its version moved. Somebody else changed the row
	// since the caller read it; re-read and decide again. The concrete error
	// is a *StaleVersionError.
	ErrStaleVersion = errors.New("fsm: stale version")

	// ErrLostRace: the row was still in a source state after every one of
	// Config.MaxAttempts UPDATEs matched nothing. Nothing was written by this
	// call; it is safe to retry.
	ErrLostRace = errors.New("fsm: lost the race too many times")

	// ErrNotFound: no row has this id.
	ErrNotFound = errors.New("fsm: row not found")

	// ErrUnknownTransition: Fire was called with a name the Definition does
	// not declare. A programming error: nothing was sent to the database.
	ErrUnknownTransition = errors.New("fsm: unknown transition")
)

// IllegalTransitionError carries what was attempted and what was found.
type IllegalTransitionError struct {
	Table      string
	ID         any
	Transition string
	From       []string // the transition's source states
	To         string
	Current    string // the state the row is in (possibly one the Definition does not know)
	Version    int64  // the row's version when classified
}

func (e *IllegalTransitionError) Error() string {
	return fmt.Sprintf("fsm: illegal transition %q (%s → %s) on %s id %v: row is in state %q",
		e.Transition, strings.Join(e.From, "|"), e.To, e.Table, e.ID, e.Current)
}

// Is makes errors.Is(err, ErrIllegalTransition) true.
func (e *IllegalTransitionError) Is(target error) bool { return target == ErrIllegalTransition }

// StaleVersionError says which version the caller expected and which it found.
type StaleVersionError struct {
	Table      string
	ID         any
	Transition string
	Current    string // the row's state, still a source state of the transition
	Expected   int64  // Options.Version
	Actual     int64  // the row's version
}

func (e *StaleVersionError) Error() string {
	return fmt.Sprintf("fsm: stale version for transition %q on %s id %v: expected version %d, row is at %d (state %q)",
		e.Transition, e.Table, e.ID, e.Expected, e.Actual, e.Current)
}

// Is makes errors.Is(err, ErrStaleVersion) true.
func (e *StaleVersionError) Is(target error) bool { return target == ErrStaleVersion }
