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

// Heartbeat keeps a claim's lease alive while its owner works: it extends
// the lease every third of its length. When the store says the lease is
// lost, or when no renewal has succeeded for four fifths of a lease (the
// store is unreachable, so another caller may take over once the lease
// runs out), it cancels the context it returned with ErrLeaseLost as the
// cause. The fifth it keeps in hand absorbs timer lateness on a loaded
// machine, so that the work stops before the store can grant the claim to
// anyone else.
//
// It runs on timers, not on a goroutine of its own: work that finishes
// within a third of the lease never starts one, and costs two timers.
type Heartbeat struct {
	ctx      context.Context
	cancel   context.CancelCauseFunc
	store    Store
	owner    Owner
	lease    time.Duration
	interval time.Duration

	mu       sync.Mutex
	stopped  bool
	renew    *time.Timer // fires every interval to extend the lease
	deadline *time.Timer // fires a lease after the last renewal was sent
	inflight sync.WaitGroup
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
	if lease <= 0 {
		lease = DefaultLease
	}
	hctx, cancel := context.WithCancelCause(ctx)
	h := &Heartbeat{ctx: hctx, cancel: cancel, store: s, owner: owner, lease: lease, interval: lease / 3}
	h.mu.Lock()
	// The lease is known to last until a whole lease after the last call
	// was sent (the store started it no earlier). Past that deadline without
	// a successful renewal another caller may take over: give up first,
	// with a fifth of the lease to spare. Timers run on this process's
	// monotonic clock; a wall-clock jump does not move them.
	h.deadline = time.AfterFunc(h.budget()-time.Since(sent), func() { h.cancel(ErrLeaseLost) })
	h.renew = time.AfterFunc(h.interval, h.tick)
	h.mu.Unlock()
	return hctx, h
}

func (h *Heartbeat) tick() {
	h.mu.Lock()
	if h.stopped || h.ctx.Err() != nil {
		h.mu.Unlock()
		return
	}
	h.inflight.Add(1)
	h.mu.Unlock()
	defer h.inflight.Done()

	sent := time.Now()
	ectx, cancel := context.WithTimeout(h.ctx, h.interval)
	err := h.store.Extend(ectx, h.owner, h.lease)
	cancel()

	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped || h.ctx.Err() != nil {
		return
	}
	switch {
	case err == nil:
		h.deadline.Reset(h.budget() - time.Since(sent))
	case errors.Is(err, ErrLeaseLost):
		h.deadline.Stop()
		h.cancel(ErrLeaseLost)
		return
	}
	// Any other error: keep trying until the deadline gives up.
	h.renew.Reset(h.interval)
}

// budget is how long after a call was sent the heartbeat still trusts the
// lease that call started or renewed.
func (h *Heartbeat) budget() time.Duration { return h.lease - h.lease/5 }

// Stop ends the renewals and waits for one in progress to return. It is
// safe to call more than once. It does not cancel the context's parent.
func (h *Heartbeat) Stop() {
	h.mu.Lock()
	if !h.stopped {
		h.stopped = true
		h.renew.Stop()
		h.deadline.Stop()
	}
	h.mu.Unlock()
	h.inflight.Wait()
	h.cancel(context.Canceled)
}

// Lost reports whether the heartbeat gave the lease up as lost: the work's
// context was cancelled with ErrLeaseLost as its cause.
func (h *Heartbeat) Lost() bool {
	return errors.Is(context.Cause(h.ctx), ErrLeaseLost)
}
