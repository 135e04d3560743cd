package httpidem

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idemkit/idem"
)

// renewer keeps a protected handler's claim alive, as idem.Heartbeat does,
// on one timer that lives in the recorder: it extends the lease every third
// of it, and cancels the handler's context with idem.ErrLeaseLost when the
// store says the lease is lost, or when no renewal has succeeded for four
// fifths of a lease (then another caller may soon take over). A handler
// that finishes within a third of the lease costs one timer.
type renewer struct {
	m      *Middleware
	owner  idem.Owner
	ctx    context.Context // for the store calls: detached from the client
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	timer   *time.Timer
	okAt    time.Time // when the call that started or last renewed the lease was sent
	running sync.WaitGroup
}

func (h *renewer) start(m *Middleware, ctx context.Context, owner idem.Owner, cancel context.CancelCauseFunc, sent time.Time) {
	h.m, h.ctx, h.owner, h.cancel, h.okAt = m, ctx, owner, cancel, sent
	h.mu.Lock()
	h.timer = time.AfterFunc(h.next(time.Now()), h.tick)
	h.mu.Unlock()
}

func (h *renewer) budget() time.Duration { return h.m.cfg.Lease - h.m.cfg.Lease/5 }

// next is how long to wait before the next renewal: a third of the lease,
// or less when the lease is trusted for less than that.
func (h *renewer) next(now time.Time) time.Duration {
	return min(h.m.cfg.Lease/3, h.okAt.Add(h.budget()).Sub(now))
}

func (h *renewer) tick() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	sent := time.Now()
	left := h.okAt.Add(h.budget()).Sub(sent)
	if left <= 0 {
		h.stopped = true
		h.mu.Unlock()
		h.cancel(idem.ErrLeaseLost)
		return
	}
	h.running.Add(1)
	h.mu.Unlock()
	defer h.running.Done()

	ectx, cancel := context.WithTimeout(h.ctx, min(h.m.cfg.Lease/3, left))
	err := h.m.store.Extend(ectx, h.owner, h.m.cfg.Lease)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	switch {
	case err == nil:
		h.okAt = sent
	case errors.Is(err, idem.ErrLeaseLost):
		h.stopped = true
		h.cancel(idem.ErrLeaseLost)
		return
	}
	// Any other error: keep trying until the lease is no longer trusted.
	d := h.next(time.Now())
	if d <= 0 {
		h.stopped = true
		h.cancel(idem.ErrLeaseLost)
		return
	}
	h.timer.Reset(d)
}

// stop ends the renewals and waits for one in progress. It is safe to
// call more than once.
func (h *renewer) stop() {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		if h.timer != nil {
			h.timer.Stop()
		}
	}
	h.mu.Unlock()
	h.running.Wait()
}
