package shop

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/lock"
)

// memLocker is the embedded backend's lock.Locker: in-process, with a TTL and
// a fence that grows with every acquisition of a name. Like redislock's
// watchdog, a timer renews each lease every TTL/3 while its holder runs, so
// that a request slowed by a busy machine keeps its lock. A holder that
// stalls (Stall: the storm's pause, standing for a GC pause or a stalled
// disk, which stop the whole process and its renewals with it) loses the
// lock after TTL, as any lease-based lock can, and the shop's constraints
// must keep the data right when that happens.
type memLocker struct {
	ttl time.Duration

	mu     sync.Mutex
	held   map[string]*memLease
	fences map[string]lock.Fence
	wake   chan struct{}
}

var _ lock.Locker = (*memLocker)(nil)

// memLockWait bounds Acquire's wait, like the other lockers' WaitTimeout.
const memLockWait = 2 * time.Second

func newMemLocker(ttl time.Duration) *memLocker {
	return &memLocker{ttl: ttl, held: map[string]*memLease{}, fences: map[string]lock.Fence{}, wake: make(chan struct{})}
}

type memLease struct {
	l       *memLocker
	name    string
	fence   lock.Fence
	expires time.Time
	ctx     context.Context
	cancel  context.CancelCauseFunc
	timer   *time.Timer // the next renewal; guarded by l.mu, as are expires and the two below
	stalled time.Time   // no renewal before this
	done    bool        // released or lost

	once sync.Once
	err  error
}

func (m *memLocker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cur := m.held[name]; cur != nil && time.Now().Before(cur.expires) {
		return nil, fmt.Errorf("%w: %s", lock.ErrNotAcquired, name)
	}
	m.fences[name]++
	lctx, cancel := context.WithCancelCause(ctx)
	le := &memLease{l: m, name: name, fence: m.fences[name], expires: time.Now().Add(m.ttl), ctx: lctx, cancel: cancel}
	le.timer = time.AfterFunc(m.ttl/3, le.renew)
	m.held[name] = le
	return le, nil
}

func (m *memLocker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	giveUp := time.Now().Add(memLockWait)
	for {
		le, err := m.TryAcquire(ctx, name)
		if err == nil {
			return le, nil
		}
		if time.Now().After(giveUp) {
			return nil, fmt.Errorf("%w: %s: waited %v", lock.ErrNotAcquired, name, memLockWait)
		}
		m.mu.Lock()
		wake := m.wake
		wait := time.Millisecond
		if cur := m.held[name]; cur != nil {
			wait = max(time.Until(cur.expires), time.Millisecond)
		}
		m.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("%w: %w", lock.ErrNotAcquired, context.Cause(ctx))
		case <-wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// renew extends the lease by TTL, unless it ran out first (a renewal that
// came too late) or its holder is stalled; then the lease is lost.
func (le *memLease) renew() {
	m := le.l
	m.mu.Lock()
	defer m.mu.Unlock()
	if le.done {
		return
	}
	now := time.Now()
	switch {
	case !now.Before(le.expires) || m.held[le.name] != le:
		le.done = true
		le.cancel(lock.ErrExpired)
	case now.Before(le.stalled):
		// The process is stalled: nothing renews. Look again when the
		// lease runs out.
		le.timer = time.AfterFunc(time.Until(le.expires), le.renew)
	default:
		le.expires = now.Add(m.ttl)
		le.timer = time.AfterFunc(m.ttl/3, le.renew)
	}
}

// Stall pauses the holder for d with its renewals stopped, as a GC pause
// or a stalled disk pauses a whole process: past the TTL the lease is lost.
func (le *memLease) Stall(d time.Duration) {
	le.l.mu.Lock()
	le.stalled = time.Now().Add(d)
	le.l.mu.Unlock()
	time.Sleep(d)
}

func (le *memLease) Name() string             { return le.name }
func (le *memLease) Fence() lock.Fence        { return le.fence }
func (le *memLease) Context() context.Context { return le.ctx }

// Valid reports whether the lease holds now by the clock, without waiting for
// the expiry timer to cancel the context.
func (le *memLease) Valid() error {
	if err := context.Cause(le.ctx); err != nil {
		return err
	}
	le.l.mu.Lock()
	defer le.l.mu.Unlock()
	if !time.Now().Before(le.expires) {
		return fmt.Errorf("%w: %s", lock.ErrExpired, le.name)
	}
	return nil
}
func (le *memLease) Release(context.Context) error {
	le.once.Do(func() {
		m := le.l
		m.mu.Lock()
		defer m.mu.Unlock()
		le.timer.Stop()
		le.done = true
		switch cur := m.held[le.name]; {
		case cur == le && time.Now().Before(le.expires):
			delete(m.held, le.name)
			close(m.wake)
			m.wake = make(chan struct{})
		case cur == le || cur == nil:
			le.err = fmt.Errorf("%w: %s", lock.ErrExpired, le.name)
		default:
			le.err = fmt.Errorf("%w: %s", lock.ErrNotHeld, le.name)
		}
		le.cancel(lock.ErrReleased)
	})
	return le.err
}
