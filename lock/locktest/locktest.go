package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/lock"
)

// wait bounds every wait of the suite: a hang detector, never a timing
// assertion.
const wait = 60 * time.Second

// Run runs the conformance suite. newLocker returns a Locker with fences
// (the default of both backends), on a lock space of its own for the test
// it is given: locks taken by one test must not be seen by another. Each
// case runs as a parallel subtest and calls newLocker once.
func Run(t *testing.T, newLocker func(t *testing.T) lock.Locker) {
	t.Helper()
	for _, c := range []struct {
		name string
		run  func(t *testing.T, l lock.Locker)
	}{
		{"AcquireReleaseAndFences", acquireReleaseAndFences},
		{"AcquireGivesUpWithItsContext", acquireGivesUp},
		{"WaiterTakesOverOnRelease", waiterTakesOver},
		{"ParentCancelReachesLease", parentCancel},
		{"MutualExclusion", mutualExclusion},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newLocker(t))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, l lock.Locker, ctx context.Context, name string) lock.Lease {
	t.Helper()
	ls, err := l.Acquire(ctx, name)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", name, err)
	}
	if ls.Name() != name {
		t.Fatalf("Acquire(%q): lease named %q", name, ls.Name())
	}
	return ls
}

// Fences grow with every acquisition; TryAcquire fails with
// ErrNotAcquired while the lock is held; Release is idempotent and ends
// the lease's context with ErrReleased.
func acquireReleaseAndFences(t *testing.T, l lock.Locker) {
	ctx := ctxT(t)
	var last lock.Fence
	for range 3 {
		ls := mustAcquire(t, l, ctx, "order:1")
		if ls.Fence() <= last {
			t.Fatalf("fence %d after %d", ls.Fence(), last)
		}
		last = ls.Fence()
		if err := ls.Valid(); err != nil {
			t.Fatalf("Valid right after Acquire: %v", err)
		}
		if other, err := l.TryAcquire(ctx, "order:1"); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire while held: %v, %v; want ErrNotAcquired", other, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("second Release: %v", err)
		}
		if cause := context.Cause(ls.Context()); !errors.Is(cause, lock.ErrReleased) {
			t.Errorf("lease context's cause after Release: %v, want ErrReleased", cause)
		}
		if err := ls.Valid(); !errors.Is(err, lock.ErrReleased) {
			t.Errorf("Valid after Release: %v, want ErrReleased", err)
		}
	}
	ls, err := l.TryAcquire(ctx, "order:1")
	if err != nil {
		t.Fatalf("TryAcquire of a released lock: %v", err)
	}
	if ls.Fence() <= last {
		t.Errorf("TryAcquire's fence %d after %d", ls.Fence(), last)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Acquire on a held lock gives up when its context ends, with an error
// wrapping both ErrNotAcquired and the context's error.
func acquireGivesUp(t *testing.T, l lock.Locker) {
	ctx := ctxT(t)
	holder := mustAcquire(t, l, ctx, "w")
	defer holder.Release(ctx)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if ls, err := l.Acquire(short, "w"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Acquire past its deadline: %v, %v; want ErrNotAcquired and DeadlineExceeded", ls, err)
	}
	cctx, ccancel := context.WithCancel(ctx)
	ccancel()
	if ls, err := l.Acquire(cctx, "w"); !errors.Is(err, lock.ErrNotAcquired) || !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire with a cancelled context: %v, %v; want ErrNotAcquired and Canceled", ls, err)
	}
	if err := holder.Valid(); err != nil {
		t.Fatalf("the holder lost its lease to a waiter that gave up: %v", err)
	}
}

// A waiting Acquire takes the lock once its holder releases it, with a
// greater fence.
func waiterTakesOver(t *testing.T, l lock.Locker) {
	ctx := ctxT(t)
	holder := mustAcquire(t, l, ctx, "h")
	type result struct {
		ls  lock.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		ls, err := l.Acquire(ctx, "h")
		got <- result{ls, err}
	}()
	if err := holder.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-got
	if r.err != nil {
		t.Fatalf("waiting Acquire: %v", r.err)
	}
	if r.ls.Fence() <= holder.Fence() {
		t.Errorf("fence %d after %d", r.ls.Fence(), holder.Fence())
	}
	if err := r.ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Cancelling the context given to Acquire cancels the lease's context with
// that cause; Release then ends the lease (nil, or ErrNotHeld or
// ErrExpired if the backend let the lock go first) and the lock can be
// taken again.
func parentCancel(t *testing.T, l lock.Locker) {
	ctx := ctxT(t)
	parent, cancel := context.WithCancel(ctx)
	ls := mustAcquire(t, l, parent, "p")
	cancel()
	select {
	case <-ls.Context().Done():
	case <-time.After(wait):
		t.Fatal("the lease's context outlived its parent")
	}
	if cause := context.Cause(ls.Context()); !errors.Is(cause, context.Canceled) {
		t.Fatalf("lease context's cause: %v, want context.Canceled", cause)
	}
	if err := ls.Release(ctx); err != nil && !errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, lock.ErrExpired) {
		t.Fatalf("Release after the parent's cancel: %v", err)
	}
	next := mustAcquire(t, l, ctx, "p")
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// Goroutines contend for one lock through lock.Do around a read, a pause
// and a write of a counter that only the lock guards: an overlap loses an
// increment and lifts the gauge of holders inside above one. Every fence
// is handed out once, and Valid holds inside.
func mutualExclusion(t *testing.T, l lock.Locker) {
	ctx := ctxT(t)
	const n = 64
	var (
		counter   int // guarded by the lock under test only
		inside    atomic.Int32
		maxInside atomic.Int32
		fences    sync.Map
		wg        sync.WaitGroup
	)
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- lock.Do(ctx, l, "counter", func(ctx context.Context, fence lock.Fence) error {
				in := inside.Add(1)
				defer inside.Add(-1)
				for m := maxInside.Load(); in > m && !maxInside.CompareAndSwap(m, in); m = maxInside.Load() {
				}
				if _, dup := fences.LoadOrStore(fence, true); dup {
					return fmt.Errorf("fence %d handed out twice", fence)
				}
				if err := lock.Valid(ctx); err != nil {
					return fmt.Errorf("lease not valid inside Do: %w", err)
				}
				v := counter
				time.Sleep(time.Millisecond)
				counter = v + 1
				return nil
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if counter != n || maxInside.Load() != 1 {
		t.Fatalf("counter = %d (want %d), most holders inside at once = %d (want 1)", counter, n, maxInside.Load())
	}
}
