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
// The watchdog is one timer per Locker (see watchdog), not a goroutine or a
// timer per lease: a lock held for less than TTL/3, the common case, never
// starts a goroutine or arms a timer of its own.
type Lease struct {
	l     *Locker
	name  string
	key   string
	value string // token + ":"
	fence lock.Fence

	// The acquire command's arguments; [3] and [5] are the key and the
	// value, boxed once, for the release and extend commands too.
	args [8]any

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	stopped  bool           // set by Release; no renewal starts after it
	renewing sync.WaitGroup // a renewal in flight; Release waits for it

	// Guarded by l.wd.mu: the lease's place in the watchdog's queue.
	due  time.Time
	qidx int

	// Touched only by renewals, which never overlap (each schedules the next).
	validUntil time.Time
	lastErr    error

	once   sync.Once
	relErr error
}

var _ lock.Lease = (*Lease)(nil)

// start makes ls a held lease with fence, its acquire request sent at sent,
// and queues its first renewal.
func (ls *Lease) start(parent context.Context, fence lock.Fence, sent time.Time) {
	l := ls.l
	ls.fence = fence
	ls.ctx, ls.cancel = context.WithCancelCause(parent)
	// The key was set no earlier than the request left, so it lives at least
	// until sent+TTL by the server's clock; margin covers clock rates.
	ls.validUntil = sent.Add(l.cfg.TTL - margin(l.cfg.TTL))
	l.wd.schedule(ls, sent.Add(l.cfg.TTL/3))
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.name }

// Fence returns the fencing token of this acquisition.
func (ls *Lease) Fence() lock.Fence { return ls.fence }

// Token returns the random owner token stored in the lock.
func (ls *Lease) Token() string { return ls.value[:len(ls.value)-1] }

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
		ls.l.wd.cancel(ls)
		ls.renewing.Wait()
		res, err := evalSHA(ctx, ls.l.rdb, releaseScript, []any{"evalsha", releaseSHA, 1, ls.args[3], ls.args[5]}).Int64()
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
	res, err := evalSHA(ctx, ls.l.rdb, extendScript, []any{"evalsha", extendSHA, 1, ls.args[3], ls.args[5], ls.l.ttlArg}).Int64()
	if err != nil {
		return err
	}
	return resultErr("extend", ls.name, res)
}

// renew is the watchdog's work for one lease, run every TTL/3. It cancels
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
	// Under ls.mu, so that Release (which sets stopped under it, then
	// removes the lease from the queue) cannot miss this entry.
	ls.mu.Lock()
	if !ls.stopped {
		ls.l.wd.schedule(ls, time.Now().Add(next))
	}
	ls.mu.Unlock()
}

func expired(ttl time.Duration, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("redislock: no renewal within the TTL (%v): %w", ttl, lock.ErrExpired)
	}
	return fmt.Errorf("redislock: no renewal within the TTL (%v): %w (last renewal: %w)", ttl, lock.ErrExpired, lastErr)
}
