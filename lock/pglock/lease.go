package pglock

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/lock"
)

// Lease is a session-level advisory lock held on a pinned connection. Its
// watchdog pings that connection every Config.CheckInterval.
type Lease struct {
	l     *Locker
	name  string
	key   int64
	fence lock.Fence
	conn  *sql.Conn

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // closed when the watchdog has returned

	once   sync.Once
	relErr error
}

var _ lock.Lease = (*Lease)(nil)

func (l *Locker) newLease(parent context.Context, conn *sql.Conn, name string, key int64, fence lock.Fence) *Lease {
	ctx, cancel := context.WithCancelCause(parent)
	ls := &Lease{l: l, name: name, key: key, fence: fence, conn: conn, ctx: ctx, cancel: cancel, done: make(chan struct{})}
	go ls.watchdog()
	return ls
}

// Name returns the lock name.
func (ls *Lease) Name() string { return ls.name }

// Key returns the advisory lock key (see Key).
func (ls *Lease) Key() int64 { return ls.key }

// Fence returns the fence drawn from the fence sequence after the lock was
// granted (0 with Config.NoFence).
func (ls *Lease) Fence() lock.Fence { return ls.fence }

// Context is cancelled when the connection holding the lock fails a check
// (the cause wraps lock.ErrExpired), on Release (lock.ErrReleased), or when
// the Acquire context is done.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Valid returns nil while the lease's context is alive, else its cause. A
// session-level lock has no TTL: a holder that was paused still holds it
// unless its session ended meanwhile (the server terminated it, the network
// cut it, a keepalive or idle_session_timeout closed it), which only a round
// trip can tell; the watchdog's next check (Config.CheckInterval) finds out
// and cancels the context. So after a pause Valid reports what the last check
// knew, without a network call; fenced writes cover the rest.
func (ls *Lease) Valid() error {
	if ls.ctx.Err() != nil {
		return context.Cause(ls.ctx)
	}
	return nil
}

// Release unlocks on the connection that took the lock and returns that
// connection to the pool. If the unlock fails, or reports that the session no
// longer held the lock, the connection is closed instead (a lock it might
// still hold ends with its session) and the error wraps lock.ErrExpired when
// the lock was already gone. A second call returns the first call's result.
func (ls *Lease) Release(ctx context.Context) error {
	ls.once.Do(func() {
		ls.cancel(lock.ErrReleased)
		<-ls.done
		var held bool
		err := ls.conn.QueryRowContext(ctx, "SELECT pg_advisory_unlock($1)", ls.key).Scan(&held)
		switch cause := context.Cause(ls.ctx); {
		case err == nil && held:
			if cerr := ls.conn.Close(); cerr != nil {
				ls.relErr = fmt.Errorf("pglock: release %q: return connection: %w", ls.name, cerr)
			}
		case lock.IsLost(cause):
			discard(ls.conn)
			ls.relErr = fmt.Errorf("pglock: release %q: %w", ls.name, cause)
		case err == nil:
			discard(ls.conn)
			ls.relErr = fmt.Errorf("pglock: release %q: the session no longer held the lock; connection discarded: %w", ls.name, lock.ErrExpired)
		default:
			discard(ls.conn)
			ls.relErr = fmt.Errorf("pglock: release %q: unlock failed; connection discarded, the server frees the lock with its session: %w", ls.name, err)
		}
	})
	return ls.relErr
}

// watchdog pings the lock's connection. A failed ping means the session (and
// with it the lock) is gone or unreachable: the lease's context is cancelled.
func (ls *Lease) watchdog() {
	defer close(ls.done)
	every := ls.l.cfg.CheckInterval
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ls.ctx.Done():
			return
		case <-t.C:
		}
		// Not derived from ls.ctx: a Release during the ping must not abort it,
		// since pgx closes a connection whose query is cancelled, and with it
		// the session that holds the lock. Release waits for the ping instead.
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ls.ctx), every)
		err := ls.conn.PingContext(pctx)
		cancel()
		if err != nil {
			if ls.ctx.Err() != nil {
				return // released or the Acquire context is done
			}
			ls.cancel(fmt.Errorf("pglock: the session holding %q failed its check: %w (%w)", ls.name, lock.ErrExpired, err))
			return
		}
	}
}
