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
// lost, or when no renewal has succeeded for a whole lease (the store is
// unreachable, so another caller may take over), it cancels the context it
// returned with ErrLeaseLost as the cause.
type Heartbeat struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	once   sync.Once
}

// StartHeartbeat returns a context derived from ctx that stays alive while
// owner holds its claim, and the heartbeat that renews it. Call Stop when
// the work ends, before Complete or Release.
func StartHeartbeat(ctx context.Context, s Store, owner Owner, lease time.Duration) (context.Context, *Heartbeat) {
	if lease <= 0 {
		lease = DefaultLease
	}
	hctx, cancel := context.WithCancelCause(ctx)
	h := &Heartbeat{ctx: hctx, cancel: cancel, done: make(chan struct{})}
	go h.run(s, owner, lease)
	return hctx, h
}

func (h *Heartbeat) run(s Store, owner Owner, lease time.Duration) {
	defer close(h.done)
	interval := lease / 3
	tick := time.NewTicker(interval)
	defer tick.Stop()
	// The lease is known to last until a whole lease after the last renewal
	// was sent (the store started it no earlier). Past that deadline without
	// a successful renewal, another caller may take over: give up first.
	// This process's monotonic clock measures it, so a wall-clock jump does
	// not move it.
	deadline := time.NewTimer(lease)
	defer deadline.Stop()
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-deadline.C:
			h.cancel(ErrLeaseLost)
			return
		case <-tick.C:
		}
		sent := time.Now()
		ectx, cancel := context.WithTimeout(h.ctx, interval)
		err := s.Extend(ectx, owner, lease)
		cancel()
		switch {
		case err == nil:
			deadline.Reset(lease - time.Since(sent))
		case errors.Is(err, ErrLeaseLost):
			h.cancel(ErrLeaseLost)
			return
		}
	}
}

// Stop ends the renewals and waits for the goroutine to exit. It is safe to
// call more than once. It does not cancel the context's parent.
func (h *Heartbeat) Stop() {
	h.once.Do(func() { h.cancel(context.Canceled) })
	<-h.done
}

// Lost reports whether the heartbeat gave the lease up as lost: the work's
// context was cancelled with ErrLeaseLost as its cause.
func (h *Heartbeat) Lost() bool {
	return errors.Is(context.Cause(h.ctx), ErrLeaseLost)
}
