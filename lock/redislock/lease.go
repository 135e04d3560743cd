package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/lock"
)

// Lease is a held Redis lock. Its watchdog renews it every TTL/3 until it is
// released, lost, or the context given to Acquire is done.
//
// The watchdog is a timer (time.AfterFunc), not a goroutine: a lock held for
// less than TTL/3, the common case, never starts one.
type Lease struct {
	l     *Locker
	name  string
	key   string
	token string
	fence lock.Fence

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	timer    *time.Timer
	stopped  bool           // set by Release; no renewal starts after it
	renewing sync.WaitGroup // a renewal in flight; Release waits for it

	// Touched only by renewals, which never overlap (each schedules the next).
	validUntil time.Time
	lastErr    error

	once   sync.Once
	relErr error
}

var _ lock.Lease = (*Lease)(nil)

func (l *Locker) newLease(parent context.Context, name, token string, fence lock.Fence, sent time.Time) *Lease {
	key, _ := l.keys(name)
	ctx, cancel := context.WithCancelCause(parent)
	ls := &Lease{l: l, name: name, key: key, token: token, fence: fence, ctx: ctx, cancel: cancel}
	// The key was set no earlier than the request left, so it lives at least
	// until sent+TTL by the server's clock; margin covers clock rates.
	ls.validUntil = sent.Add(l.cfg.TTL - margin(l.cfg.TTL))
	ls.mu.Lock()
	ls.timer = time.AfterFunc(l.cfg.TTL/3, ls.renew)
	ls.mu.Unlock()
	return ls
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.name }

// Fence returns the fencing token of this acquisition.
func (ls *Lease) Fence() lock.Fence { return ls.fence }

// Token returns the random owner token stored in the lock.
func (ls *Lease) Token() string { return ls.token }

// Context is cancelled when the lease is lost, released, or the Acquire
// context is done; context.Cause says which.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Release stops the watchdog and deletes the lock if it still holds this
// lease's token. It returns an error wrapping lock.ErrNotHeld if another
// owner holds the lock now, lock.ErrExpired if the lock is gone; in both
// cases nothing is deleted. A second call returns the first call's result.
func (ls *Lease) Release(ctx context.Context) error {
	ls.once.Do(func() {
		ls.cancel(lock.ErrReleased) // aborts a renewal in flight
		ls.mu.Lock()
		ls.stopped = true
		ls.mu.Unlock()
		ls.timer.Stop()
		ls.renewing.Wait()
		res, err := releaseScript.Run(ctx, ls.l.rdb, []string{ls.key}, ls.token).Int64()
		if err != nil {
			ls.relErr = fmt.Errorf("redislock: release %q: %w", ls.name, err)
			return
		}
		ls.relErr = resultErr("release", ls.name, res)
	})
	return ls.relErr
}

func resultErr(op, name string, res int64) error {
	switch res {
	case resultOK:
		return nil
	case resultExpired:
		return fmt.Errorf("redislock: %s %q: %w", op, name, lock.ErrExpired)
	case resultNotHeld:
		return fmt.Errorf("redislock: %s %q: %w", op, name, lock.ErrNotHeld)
	default:
		return fmt.Errorf("redislock: %s %q: unexpected reply %d", op, name, res)
	}
}

// extend resets the lock's TTL if it still holds this lease's token.
func (ls *Lease) extend(ctx context.Context) error {
	res, err := extendScript.Run(ctx, ls.l.rdb, []string{ls.key}, ls.token, ls.l.cfg.TTL.Milliseconds()).Int64()
	if err != nil {
		return err
	}
	return resultErr("extend", ls.name, res)
}

// renew is the watchdog, run by the lease's timer every TTL/3. It cancels
// the lease's context the moment a renewal says the lock is gone or another
// owner's, or when the time up to which the last successful renewal kept the
// lock alive (validUntil) has passed without a new one, e.g. because Redis is
// unreachable; it retries every TTL/20 until then. It never re-acquires, and
// stops once the lease's context is done.
func (ls *Lease) renew() {
	ls.mu.Lock()
	if ls.stopped {
		ls.mu.Unlock()
		return
	}
	ls.renewing.Add(1)
	ls.mu.Unlock()
	defer ls.renewing.Done()

	if ls.ctx.Err() != nil {
		return // lost, released, or the Acquire context is done
	}
	ttl := ls.l.cfg.TTL
	if !time.Now().Before(ls.validUntil) {
		ls.cancel(expired(ttl, ls.lastErr))
		return
	}
	rctx, cancel := context.WithDeadline(ls.ctx, ls.validUntil)
	sent := time.Now()
	err := ls.extend(rctx)
	cancel()
	var next time.Duration
	switch {
	case err == nil:
		ls.lastErr = nil
		ls.validUntil = sent.Add(ttl - margin(ttl))
		next = ttl / 3
	case lock.IsLost(err):
		ls.cancel(err)
		return
	case ls.ctx.Err() != nil:
		return
	default:
		ls.lastErr = err
		left := time.Until(ls.validUntil)
		if left <= 0 {
			ls.cancel(expired(ttl, err))
			return
		}
		next = min(max(ttl/20, time.Millisecond), left)
	}
	ls.mu.Lock()
	if !ls.stopped {
		ls.timer.Reset(next)
	}
	ls.mu.Unlock()
}

func expired(ttl time.Duration, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("redislock: no renewal within the TTL (%v): %w", ttl, lock.ErrExpired)
	}
	return fmt.Errorf("redislock: no renewal within the TTL (%v): %w (last renewal: %w)", ttl, lock.ErrExpired, lastErr)
}
