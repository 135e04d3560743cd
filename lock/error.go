package lock

import (
	"errors"
	"fmt"
)

// Sentinel errors. Backends wrap them with %w; test with errors.Is.
var (
	// ErrNotAcquired: another owner holds the lock (TryAcquire), or the wait
	// for it ran out (Acquire; then the error also wraps the context's cause).
	ErrNotAcquired = errors.New("lock: not acquired: held by another owner")

	// ErrNotHeld: the lock exists but belongs to another owner now. The
	// caller's lease was lost (it expired and somebody else acquired it).
	ErrNotHeld = errors.New("lock: not held: another owner holds the lock")

	// ErrExpired: the lock no longer exists for this holder: its TTL ran out
	// without a renewal, the server lost its data, or (PostgreSQL) the session
	// that held it ended.
	ErrExpired = errors.New("lock: expired: the lock no longer exists")

	// ErrReleased is the cause of a lease context cancelled by Release.
	ErrReleased = errors.New("lock: released")

	// ErrStaleFence: a fenced write was refused because a holder with a newer
	// fence has already written.
	ErrStaleFence = errors.New("lock: stale fence: a newer holder has written")

	// ErrUnavailable: the backend could not be reached (connection refused,
	// reset, no reply in time), as opposed to another owner holding the
	// lock. TryAcquire's error wraps it alone; an Acquire whose wait ran
	// out while its last attempt failed this way wraps it together with
	// ErrNotAcquired, so that an alert can tell an outage from contention.
	// The backend has cleaned up an attempt that may have taken the lock.
	ErrUnavailable = errors.New("lock: backend unavailable")
)

// IsLost reports whether err says that a lease was lost: ErrNotHeld or
// ErrExpired.
func IsLost(err error) bool {
	return errors.Is(err, ErrNotHeld) || errors.Is(err, ErrExpired)
}

// StaleFenceError is returned by FencedTable.Update when the row carries a
// newer fence than the writer's. It matches ErrStaleFence with errors.Is.
type StaleFenceError struct {
	Fence   Fence // the fence the writer presented
	Current Fence // the fence stored in the row
}

func (e *StaleFenceError) Error() string {
	return fmt.Sprintf("lock: stale fence %d: the row already carries fence %d", e.Fence, e.Current)
}

// Unwrap makes errors.Is(err, ErrStaleFence) true.
func (e *StaleFenceError) Unwrap() error { return ErrStaleFence }
