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
type Lease struct {
	l     *Locker
	name  string
	key   string
	token string
	fence lock.Fence

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the watchdog has returned

	once   sync.Once
	relErr error
}

var _ lock.Lease = (*Lease)(nil)

func (l *Locker) newLease(parent context.Context, name, token string, fence lock.Fence, sent time.Time) *Lease {
	key, _ := l.keys(name)
	ctx, cancel := context.WithCancelCause(parent)
	ls := &Lease{l: l, name: name, key: key, token: token, fence: fence, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	// The key was set no earlier than the request left, so it lives at least
	// until sent+TTL by the server's clock; margin covers clock rates.
	go ls.watchdog(sent.Add(l.cfg.TTL - margin(l.cfg.TTL)))
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
		ls.cancel(lock.ErrReleased)
		<-ls.done
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

// watchdog renews the lock every TTL/3. It cancels the lease's context the
// moment a renewal says the lock is gone or another owner's, or when the time
// up to which the last successful renewal kept the lock alive (validUntil)
// has passed without a new one, e.g. because Redis is unreachable. It never
// re-acquires.
func (ls *Lease) watchdog(validUntil time.Time) {
	defer close(ls.done)
	ttl := ls.l.cfg.TTL
	interval := ttl / 3
	retry := max(ttl/20, time.Millisecond)
	t := time.NewTimer(interval)
	defer t.Stop()
	var lastErr error
	for {
		select {
		case <-ls.ctx.Done():
			return
		case <-t.C:
		}
		if !time.Now().Before(validUntil) {
			ls.cancel(expired(ttl, lastErr))
			return
		}
		rctx, cancel := context.WithDeadline(ls.ctx, validUntil)
		sent := time.Now()
		err := ls.extend(rctx)
		cancel()
		switch {
		case err == nil:
			lastErr = nil
			validUntil = sent.Add(ttl - margin(ttl))
			t.Reset(interval)
		case lock.IsLost(err):
			ls.cancel(err)
			return
		case ls.ctx.Err() != nil:
			return // released, or the Acquire context is done
		default:
			lastErr = err
			left := time.Until(validUntil)
			if left <= 0 {
				ls.cancel(expired(ttl, lastErr))
				return
			}
			t.Reset(min(retry, left))
		}
	}
}

func expired(ttl time.Duration, lastErr error) error {
	if lastErr == nil {
		return fmt.Errorf("redislock: no renewal within the TTL (%v): %w", ttl, lock.ErrExpired)
	}
	return fmt.Errorf("redislock: no renewal within the TTL (%v): %w (last renewal: %w)", ttl, lock.ErrExpired, lastErr)
}
