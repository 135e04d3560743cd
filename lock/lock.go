package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

// Fence is a fencing token: a number that grows with every acquisition of a
// lock name. A holder passes its fence to the storage it writes to, and the
// storage refuses a write whose fence is older than the newest one it has
// seen (see FencedTable). The zero Fence means "no fence". Like idem.Fence
// it is an alias of uint64: a lock's fence and a claim's fence are one type.
type Fence = uint64

// Locker hands out leases on named locks. redislock.Locker and pglock.Locker
// implement it.
type Locker interface {
	// Acquire waits until the lock is granted, ctx is done or the backend's
	// wait limit runs out. The lease's Context is derived from ctx.
	Acquire(ctx context.Context, name string) (Lease, error)
	// TryAcquire makes one attempt and returns an error wrapping
	// ErrNotAcquired if another owner holds the lock.
	TryAcquire(ctx context.Context, name string) (Lease, error)
}

// Lease is one holder's claim on a lock.
type Lease interface {
	// Name is the lock name the lease was acquired for.
	Name() string
	// Fence is the fencing token of this acquisition (0 if the backend was
	// configured without fences).
	Fence() Fence
	// Context is derived from the context given to Acquire. It is cancelled
	// when the lease is lost (the cause wraps ErrNotHeld or ErrExpired), when
	// it is released (the cause is ErrReleased) or when the parent is done.
	// Work protected by the lock should run under this context.
	Context() context.Context
	// Valid reports, synchronously and without a network call, whether the
	// lease surely still holds at this instant: nil if so, else why not (the
	// same cause as Context's, wrapping ErrExpired, ErrNotHeld or
	// ErrReleased, or the parent context's). A holder that may have been
	// paused (a GC pause, SIGSTOP, a VM migration) calls it right before it
	// acts: after a pause the watchdog may not have run yet, Valid does not
	// wait for it. It narrows the window between losing a lock and noticing;
	// it cannot close it (a pause can fall between Valid and the write), which
	// is what fences are for.
	Valid() error
	// Release gives the lock back. It never releases a lock that now belongs
	// to another owner: it reports ErrNotHeld or ErrExpired instead. Calling
	// it again returns the first call's result.
	Release(ctx context.Context) error
}

// ReleaseTimeout bounds the release that Do performs after fn returns. The
// release runs under context.WithoutCancel(ctx), so a cancelled caller still
// gives the lock back.
const ReleaseTimeout = 5 * time.Second

// Do acquires name from l, runs fn under the lease's context with the lease's
// fence, and releases the lock, also when fn panics. Inside fn, Valid(ctx)
// is the lease's Valid: call it right before an action that a paused holder
// must not take.
//
// Do returns fn's error. If the release fails (the lease was lost while fn
// ran, or the backend is unreachable), that error is joined to fn's, so
// errors.Is(err, ErrExpired) or IsLost(err) tells the caller that mutual
// exclusion did not hold for the whole of fn. A lock is an optimisation for
// concurrency: fn must still protect correctness itself, by re-reading state
// inside the lock (the double check) and by writing with its fence.
func Do(ctx context.Context, l Locker, name string, fn func(ctx context.Context, fence Fence) error) (err error) {
	if l == nil {
		return configError("l", "nil Locker")
	}
	if fn == nil {
		return configError("fn", "nil")
	}
	lease, err := l.Acquire(ctx, name)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReleaseTimeout)
		defer cancel()
		if rerr := lease.Release(rctx); rerr != nil {
			err = errors.Join(err, fmt.Errorf("lock: release %q: %w", name, rerr))
		}
	}()
	return fn(context.WithValue(lease.Context(), leaseKey{}, lease), lease.Fence())
}

type leaseKey struct{}

// Valid is Lease.Valid for the lease that Do runs fn under, found in ctx (or
// a context derived from it). Outside Do it returns an error saying that ctx
// carries no lease.
func Valid(ctx context.Context) error {
	lease, ok := ctx.Value(leaseKey{}).(Lease)
	if !ok {
		return errors.New("lock: Valid: the context carries no lease (it is not from lock.Do)")
	}
	return lease.Valid()
}

// configError is the *idem.ConfigError of package lock.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "lock", Field: field, Reason: reason}
}
