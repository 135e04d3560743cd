package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/idemkit/idem/lock"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memLocker is an in-process Locker for testing Do.
type memLocker struct {
	mu         sync.Mutex
	held       map[string]bool
	fence      lock.Fence
	acquireErr error
	releaseErr error
	releases   int
}

type memLease struct {
	l      *memLocker
	name   string
	fence  lock.Fence
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func (l *memLocker) Acquire(ctx context.Context, name string) (lock.Lease, error) {
	return l.TryAcquire(ctx, name)
}

func (l *memLocker) TryAcquire(ctx context.Context, name string) (lock.Lease, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.acquireErr != nil {
		return nil, l.acquireErr
	}
	if l.held == nil {
		l.held = map[string]bool{}
	}
	if l.held[name] {
		return nil, lock.ErrNotAcquired
	}
	l.held[name] = true
	l.fence++
	c, cancel := context.WithCancelCause(ctx)
	return &memLease{l: l, name: name, fence: l.fence, ctx: c, cancel: cancel}, nil
}

func (ls *memLease) Name() string             { return ls.name }
func (ls *memLease) Fence() lock.Fence        { return ls.fence }
func (ls *memLease) Context() context.Context { return ls.ctx }
func (ls *memLease) Valid() error {
	if ls.ctx.Err() != nil {
		return context.Cause(ls.ctx)
	}
	return nil
}
func (ls *memLease) Release(ctx context.Context) error {
	ls.cancel(lock.ErrReleased)
	ls.l.mu.Lock()
	defer ls.l.mu.Unlock()
	ls.l.releases++
	delete(ls.l.held, ls.name)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return ls.l.releaseErr
}

func TestDoRunsUnderLeaseAndReleases(t *testing.T) {
	l := &memLocker{}
	var (
		gotFence lock.Fence
		gotCtx   context.Context
	)
	err := lock.Do(context.Background(), l, "a", func(ctx context.Context, fence lock.Fence) error {
		gotFence, gotCtx = fence, ctx
		if _, err := l.TryAcquire(ctx, "a"); !errors.Is(err, lock.ErrNotAcquired) {
			t.Errorf("lock not held inside Do: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if gotFence != 1 || l.releases != 1 || len(l.held) != 0 {
		t.Fatalf("fence %d, releases %d, held %v", gotFence, l.releases, l.held)
	}
	if !errors.Is(context.Cause(gotCtx), lock.ErrReleased) {
		t.Errorf("fn's context after Do: %v, want the lease context, released", context.Cause(gotCtx))
	}
}

func TestDoErrors(t *testing.T) {
	boom := errors.New("boom")
	t.Run("fn error is returned, lock released", func(t *testing.T) {
		l := &memLocker{}
		if err := lock.Do(context.Background(), l, "a", func(context.Context, lock.Fence) error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("err %v", err)
		}
		if l.releases != 1 {
			t.Fatal("not released")
		}
	})
	t.Run("acquire error, fn not run", func(t *testing.T) {
		l := &memLocker{acquireErr: lock.ErrNotAcquired}
		ran := false
		err := lock.Do(context.Background(), l, "a", func(context.Context, lock.Fence) error { ran = true; return nil })
		if !errors.Is(err, lock.ErrNotAcquired) || ran {
			t.Fatalf("err %v, ran %v", err, ran)
		}
	})
	t.Run("lost lease is reported with fn's error", func(t *testing.T) {
		l := &memLocker{releaseErr: lock.ErrExpired}
		err := lock.Do(context.Background(), l, "a", func(context.Context, lock.Fence) error { return boom })
		if !errors.Is(err, boom) || !errors.Is(err, lock.ErrExpired) || !lock.IsLost(err) {
			t.Fatalf("err %v", err)
		}
		err = lock.Do(context.Background(), l, "a", func(context.Context, lock.Fence) error { return nil })
		if !errors.Is(err, lock.ErrExpired) {
			t.Fatalf("success with lost lease: %v", err)
		}
	})
	t.Run("cancelled caller still releases", func(t *testing.T) {
		l := &memLocker{}
		ctx, cancel := context.WithCancel(context.Background())
		err := lock.Do(ctx, l, "a", func(context.Context, lock.Fence) error { cancel(); return nil })
		if err != nil || l.releases != 1 {
			t.Fatalf("err %v, releases %d", err, l.releases)
		}
	})
	t.Run("panic releases and propagates", func(t *testing.T) {
		l := &memLocker{}
		func() {
			defer func() {
				if r := recover(); r != "oops" {
					t.Errorf("recovered %v", r)
				}
			}()
			_ = lock.Do(context.Background(), l, "a", func(context.Context, lock.Fence) error { panic("oops") })
		}()
		if l.releases != 1 || len(l.held) != 0 {
			t.Fatal("panic left the lock held")
		}
	})
	t.Run("nil arguments", func(t *testing.T) {
		if err := lock.Do(context.Background(), nil, "a", func(context.Context, lock.Fence) error { return nil }); err == nil {
			t.Error("nil locker accepted")
		}
		if err := lock.Do(context.Background(), &memLocker{}, "a", nil); err == nil {
			t.Error("nil fn accepted")
		}
	})
}

func TestIsLost(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{lock.ErrNotHeld, true},
		{lock.ErrExpired, true},
		{errors.Join(errors.New("x"), lock.ErrExpired), true},
		{lock.ErrNotAcquired, false},
		{lock.ErrReleased, false},
		{nil, false},
	} {
		if got := lock.IsLost(c.err); got != c.want {
			t.Errorf("IsLost(%v) = %v", c.err, got)
		}
	}
}
