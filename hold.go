package idem

import (
	"context"
	"errors"
	"sync"
	"time"
)

type ownerKey struct{}

// WithOwner returns a context that carries owner, so that code deep inside
// the protected operation can read its fence.
func WithOwner(ctx context.Context, owner Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the Owner stored by WithOwner (Do and the HTTP
// middleware store it for the operation they run).
func OwnerFromContext(ctx context.Context) (Owner, bool) {
	o, ok := ctx.Value(ownerKey{}).(Owner)
	return o, ok
}

// FenceFromContext returns the fencing token of the claim the context runs
// under, or 0 outside of one. Pass it to your own conditional writes
// (… WHERE fence < $1) so that an owner that lost its lease cannot overwrite
// the work of the one that took over.
func FenceFromContext(ctx context.Context) uint64 {
	o, _ := OwnerFromContext(ctx)
	return o.Fence
}

// Heartbeat keeps a claim's lease alive while its owner works. It holds
// idem's one renewal rule, which Do, httpidem's middleware and the RPC
// interceptors all use (through Attempt): it extends the lease every third
// of its length. When the store says the lease is lost, or when no renewal
// has succeeded for four fifths of a lease (the store is unreachable, so
// another caller may take over once the lease runs out), it cancels the
// work's context with ErrLeaseLost as the cause. The fifth it keeps in
// hand absorbs timer lateness on a loaded machine, so that the work stops
// before the store can grant the claim to anyone else.
//
// It runs on one timer, not on a goroutine of its own: work that finishes
// within a third of the lease never starts one.
type Heartbeat struct {
	store  Store
	owner  Owner
	lease  time.Duration
	ctx    context.Context // the Extend calls run on it
	cancel context.CancelCauseFunc

	mu      sync.Mutex
	stopped bool
	lost    bool
	timer   *time.Timer
	okAt    time.Time // when the call that started or last renewed the lease was sent
	running sync.WaitGroup
}

// StartHeartbeat returns a context derived from ctx that stays alive while
// owner holds its claim, and the heartbeat that renews it. Call Stop when
// the work ends, before Complete or Release.
//
// It counts the lease from now. The store started it earlier, when it ran
// Begin: prefer StartHeartbeatFrom with the time Begin was sent.
func StartHeartbeat(ctx context.Context, s Store, owner Owner, lease time.Duration) (context.Context, *Heartbeat) {
	return StartHeartbeatFrom(ctx, s, owner, lease, time.Now())
}

// StartHeartbeatFrom is StartHeartbeat for a lease that the store started
// no earlier than sent: the time the Begin call that returned owner was
// made. Without it, a slow Begin reply would let the lease run out in the
// store before the heartbeat gives it up.
func StartHeartbeatFrom(ctx context.Context, s Store, owner Owner, lease time.Duration, sent time.Time) (context.Context, *Heartbeat) {
	hctx, cancel := context.WithCancelCause(ctx)
	h := new(Heartbeat)
	h.start(hctx, cancel, s, owner, lease, sent)
	return hctx, h
}

// start starts h: the renewals run on ctx, and cancel ends the work with
// ErrLeaseLost. The lease is known to last until a whole lease after the
// last call was sent (the store started it no earlier). Timers run on this
// process's monotonic clock; a wall-clock jump does not move them.
func (h *Heartbeat) start(ctx context.Context, cancel context.CancelCauseFunc, s Store, owner Owner, lease time.Duration, sent time.Time) {
	if lease <= 0 {
		lease = DefaultLease
	}
	h.store, h.owner, h.lease, h.ctx, h.cancel, h.okAt = s, owner, lease, ctx, cancel, sent
	h.mu.Lock()
	h.timer = time.AfterFunc(h.next(time.Now()), h.tick)
	h.mu.Unlock()
}

// budget is how long after a call was sent the heartbeat still trusts the
// lease that call started or renewed.
func (h *Heartbeat) budget() time.Duration { return h.lease - h.lease/5 }

// next is how long to wait before the next renewal: a third of the lease,
// or less when the lease is trusted for less than that.
func (h *Heartbeat) next(now time.Time) time.Duration {
	return min(h.lease/3, h.okAt.Add(h.budget()).Sub(now))
}

func (h *Heartbeat) tick() {
	h.mu.Lock()
	if h.stopped || h.ctx.Err() != nil { // stopped, or the work's context ended
		h.mu.Unlock()
		return
	}
	sent := time.Now()
	left := h.okAt.Add(h.budget()).Sub(sent)
	if left <= 0 {
		h.giveUp()
		h.mu.Unlock()
		return
	}
	h.running.Add(1)
	h.mu.Unlock()
	defer h.running.Done()

	ectx, cancel := context.WithTimeout(h.ctx, min(h.lease/3, left))
	err := h.store.Extend(ectx, h.owner, h.lease)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	switch {
	case err == nil:
		h.okAt = sent
	case errors.Is(err, ErrLeaseLost):
		h.giveUp()
		return
	}
	// Any other error: keep trying until the lease is no longer trusted.
	d := h.next(time.Now())
	if d <= 0 {
		h.giveUp()
		return
	}
	h.timer.Reset(d)
}

// giveUp ends the work with ErrLeaseLost; h.mu is held.
func (h *Heartbeat) giveUp() {
	h.stopped, h.lost = true, true
	h.cancel(ErrLeaseLost)
}

// stop ends the renewals and waits for one in progress to return, without
// ending the work's context. It is safe to call more than once.
func (h *Heartbeat) stop() {
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

// Stop ends the renewals and waits for one in progress to return. It is
// safe to call more than once. It cancels the context StartHeartbeat
// returned, not its parent.
func (h *Heartbeat) Stop() {
	h.stop()
	h.cancel(context.Canceled)
}

// Lost reports whether the heartbeat gave the lease up as lost: the work's
// context was cancelled with ErrLeaseLost as its cause.
func (h *Heartbeat) Lost() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}
