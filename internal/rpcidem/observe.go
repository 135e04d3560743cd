package rpcidem

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// The RPC adapters report to an observe.Observer, so that one hook,
// promidem or otelidem serves HTTP and RPC alike. For them an Event's
// Protocol is the Guard's, its Method the full method (gRPC) or procedure
// (Connect) name, its Path is empty, and its Status is the answer's status
// code (0 is OK): the RPC code, not an HTTP status. A PhaseEnd of
// PhaseWork carries the code too, unless the handler panicked.

var errPanicked = errors.New("handler panicked")

// Observe reports decision d on a call to method, with the code answered.
// The adapters call it for the decisions they make themselves (keyless,
// rejected); Run for the others.
func (g *Guard) Observe(ctx context.Context, method string, key idem.Key, d observe.Decision, code uint32, err error) {
	if g.Observer == nil {
		return
	}
	e := observe.Event{Protocol: g.Protocol, Decision: d, Method: method, Status: int(code), Replayed: d == observe.DecisionReplayed, Err: err}
	if !key.IsZero() {
		e.Digest = key.Digest()
	}
	g.Observer.Decided(ctx, e)
}

// refused reports a refusal of the guard's.
func (g *Guard) refused(ctx context.Context, method string, key idem.Key, ref *Refusal, err error) {
	g.Observe(ctx, method, key, ref.decision, ref.Code, err)
}

func (g *Guard) phase(ctx context.Context, p observe.Phase, key idem.Key) (context.Context, func(observe.PhaseEnd)) {
	if g.phases == nil {
		return ctx, nil
	}
	return g.phases.StartPhase(ctx, p, key.String())
}

// completing starts PhaseComplete: the phase's context, the detached one
// its store calls run on (finish, without a PhaseObserver), and its end.
func (g *Guard) completing(ctx context.Context, key idem.Key, finish context.Context) (context.Context, context.Context, func(observe.PhaseEnd)) {
	if g.phases == nil {
		return ctx, finish, nil
	}
	cctx, end := g.phases.StartPhase(ctx, observe.PhaseComplete, key.String())
	return cctx, context.WithoutCancel(cctx), end
}

func (g *Guard) endPhase(end func(observe.PhaseEnd), e observe.PhaseEnd) {
	if end != nil {
		e.Protocol = g.Protocol
		end(e)
	}
}

func (g *Guard) storeCall(ctx context.Context, op observe.StoreOp, t0 time.Time, err error) {
	if g.Observer != nil {
		g.Observer.StoreCall(ctx, observe.StoreCall{Protocol: g.Protocol, Op: op, Duration: time.Since(t0), Err: err})
	}
}

func (g *Guard) complete(ctx context.Context, owner idem.Owner, data []byte) error {
	t0 := time.Now()
	err := g.Store.Complete(ctx, owner, data)
	g.storeCall(ctx, observe.OpComplete, t0, err)
	return err
}

func (g *Guard) release(ctx context.Context, owner idem.Owner) error {
	t0 := time.Now()
	err := g.Store.Release(ctx, owner)
	g.storeCall(ctx, observe.OpRelease, t0, err)
	return err
}

// claimDecision is what the store's answer to Begin means, for
// PhaseDecide's end.
func claimDecision(ctx context.Context, c idem.Claim, err error) observe.Decision {
	switch {
	case err != nil && ctx.Err() != nil:
		return observe.DecisionCanceled
	case err != nil:
		return observe.DecisionStoreError
	}
	switch c.Outcome {
	case idem.Acquired:
		return observe.DecisionAcquired
	case idem.Replay:
		return observe.DecisionReplayed
	case idem.Mismatch:
		return observe.DecisionMismatch
	case idem.InFlight:
		return observe.DecisionInFlight
	}
	return observe.DecisionStoreError
}
