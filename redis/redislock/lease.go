package redislock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/internal/redisclient"
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

	// The acquire script's keys (lock, fence) and arguments (value, ttl,
	// fence ttl); keys[:1] and args[:1] serve the release, keys[:1] and
	// args[:2] the extend script.
	keys [2]string
	args [3]string

	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	stopped  bool           // set by Release; no renewal starts after it
	renewing sync.WaitGroup // a renewal in flight; Release waits for it

	// The local deadline: until it the lock surely lives in Redis, by the
	// holder's monotonic clock (nanoseconds since epoch). Written under
	// l.wd.mu, only forward, only by a renewal that succeeded; read without
	// a lock by Valid.
	until atomic.Int64

	// Guarded by l.wd.mu: the lease's place in the watchdog's queue, what the
	// entry is for, and the last renewal error (for the expiry cause).
	due      time.Time
	qidx     int
	deadline bool // the entry is the local deadline (a renewal is in flight), not a renewal
	lastErr  error

	once   sync.Once
	relErr error
}

var _ lock.Lease = (*Lease)(nil)

// epoch is the origin of Lease.until: durations since it are read from the
// monotonic clock, so a wall-clock step on this host moves no deadline.
var epoch = time.Now()

func mono(t time.Time) int64 { return int64(t.Sub(epoch)) }

// start makes ls a held lease with fence, its acquire request sent at sent,
// and queues its first renewal.
func (ls *Lease) start(parent context.Context, fence lock.Fence, sent time.Time) {
	l := ls.l
	ls.fence = fence
	ls.ctx, ls.cancel = context.WithCancelCause(parent)
	// The key was set no earlier than the request left, so it lives at least
	// until sent+TTL by the server's clock; the margin covers clock rates
	// and the holder's own delays.
	ls.until.Store(mono(sent.Add(l.cfg.TTL - l.cfg.SafetyMargin)))
	l.wd.schedule(ls, sent.Add(l.cfg.TTL/3), false)
}

// Valid reports, without a network call, whether the lock surely still
// belongs to this lease at this instant: nil if the local deadline has not
// passed (the TTL bought by the last successful renewal, measured on this
// process's monotonic clock from when that renewal was sent, less
// Config.SafetyMargin) and the lease was not lost, released or cancelled;
// otherwise the reason, which is also the cause of Context. A holder that may
// have been paused (GC, SIGSTOP, a VM migration) calls it right before it
// acts: the watchdog's timer may not have run yet after the pause, Valid does
// not wait for it. Valid narrows the window, it cannot close it: a pause
// between Valid and the write is still possible, which is what fences are
// for.
func (ls *Lease) Valid() error {
	if ls.ctx.Err() != nil {
		return context.Cause(ls.ctx)
	}
	if mono(time.Now()) >= ls.until.Load() {
		ls.l.wd.mu.Lock()
		lastErr := ls.lastErr
		ls.l.wd.mu.Unlock()
		ls.cancel(expired(ls.l.cfg.TTL, lastErr))
		return context.Cause(ls.ctx)
	}
	return nil
}

// Deadline returns the local deadline: the instant (on this process's
// monotonic clock) until which the lock surely lives, moved forward by each
// successful renewal. The lease's context is cancelled at this instant at
// the latest, whatever Redis does.
func (ls *Lease) Deadline() time.Time {
	return epoch.Add(time.Duration(ls.until.Load()))
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
		res, err := ls.l.c.Eval(ctx, releaseScript, ls.keys[:1], ls.args[:1]...).Int64()
		if err != nil && !redisclient.IsServerError(err) && ctx.Err() == nil {
			// A transport error, such as a connection that died with a
			// restarted server (rueidis reports it and does not resend).
			// The release script only ever deletes this lease's own token,
			// so running it once more on a fresh connection is safe: at
			// worst a release whose first reply was lost reports
			// ErrExpired.
			res, err = ls.l.c.Eval(ctx, releaseScript, ls.keys[:1], ls.args[:1]...).Int64()
		}
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
	res, err := ls.l.c.Eval(ctx, extendScript, ls.keys[:1], ls.args[:2]...).Int64()
	if err != nil {
		return err
	}
	return resultErr("extend", ls.name, res)
}

// renew is the watchdog's work for one lease, run every TTL/3 on a goroutine
// of its own. While it runs, the watchdog holds the lease's local deadline
// in its queue instead of a renewal: if Redis does not answer in time, the
// watchdog cancels the context at the deadline without waiting for this
// call (see watchdog.fire). renew cancels the context the moment a renewal
// says the lock is gone or another owner's; after a failed renewal it
// retries every TTL/20 until the deadline. A renewal that succeeded moves the
// deadline to TTL − SafetyMargin after the moment the renewal was sent. It
// never re-acquires, and stops once the lease's context is done.
func (ls *Lease) renew() {
	ls.mu.Lock()
	if ls.stopped {
		ls.mu.Unlock()
		return
	}
	ls.renewing.Add(1)
	ls.mu.Unlock()
	defer ls.renewing.Done()

	wd := &ls.l.wd
	if ls.ctx.Err() != nil {
		wd.cancel(ls) // lost, released, or the Acquire context is done
		return
	}
	ttl := ls.l.cfg.TTL
	until := epoch.Add(time.Duration(ls.until.Load()))
	rctx, cancel := context.WithDeadline(ls.ctx, until)
	sent := time.Now()
	err := ls.extend(rctx)
	cancel()
	switch {
	case lock.IsLost(err):
		wd.cancel(ls)
		ls.cancel(err)
		return
	case ls.ctx.Err() != nil:
		wd.cancel(ls)
		return
	}
	// Under ls.mu, so that Release (which sets stopped under it, then
	// removes the lease from the queue) cannot miss this entry.
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.stopped {
		return
	}
	if !wd.renewed(ls, sent, err) {
		// The deadline passed first; the watchdog has cancelled the context
		// (or is about to, in its own goroutine). Say so here too.
		ls.cancel(expired(ttl, err))
	}
}

func expired(ttl time.Duration, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("redislock: no renewal within the TTL (%v): %w", ttl, lock.ErrExpired)
	}
	return fmt.Errorf("redislock: no renewal within the TTL (%v): %w (last renewal: %w)", ttl, lock.ErrExpired, lastErr)
}
