package rpcidem

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
)

// The RPC adapters report to an httpidem.Observer, so that one hook,
// promidem or otelidem serves HTTP and RPC alike. For them an Event's
// Method is the full method (gRPC) or procedure (Connect) name, its Path
// is empty, and its Status is the answer's status code (0 is OK): the RPC
// code, not an HTTP status. A PhaseEnd of PhaseWork carries no Status.

var errPanicked = errors.New("handler panicked")

// Observe reports decision d on a call to method, with the code answered.
// The adapters call it for the decisions they make themselves (keyless,
// rejected); Run for the others.
func (g *Guard) Observe(ctx context.Context, method string, key idem.Key, d httpidem.Decision, code uint32, err error) {
	if g.Observer == nil {
		return
	}
	e := httpidem.Event{Decision: d, Method: method, Status: int(code), Replayed: d == httpidem.DecisionReplayed, Err: err}
	if !key.IsZero() {
		e.Digest = key.Digest()
	}
	g.Observer.Decided(ctx, e)
}

// refused reports a refusal of the guard's.
func (g *Guard) refused(ctx context.Context, method string, key idem.Key, ref *Refusal, err error) {
	g.Observe(ctx, method, key, ref.decision, ref.Code, err)
}

func (g *Guard) phase(ctx context.Context, p httpidem.Phase, key idem.Key) (context.Context, func(httpidem.PhaseEnd)) {
	if g.phases == nil {
		return ctx, nil
	}
	return g.phases.StartPhase(ctx, p, key.String())
}

// completing starts PhaseComplete: the phase's context, the detached one
// its store calls run on (finish, without a PhaseObserver), and its end.
func (g *Guard) completing(ctx context.Context, key idem.Key, finish context.Context) (context.Context, context.Context, func(httpidem.PhaseEnd)) {
	if g.phases == nil {
		return ctx, finish, nil
	}
	cctx, end := g.phases.StartPhase(ctx, httpidem.PhaseComplete, key.String())
	return cctx, context.WithoutCancel(cctx), end
}

func endPhase(end func(httpidem.PhaseEnd), e httpidem.PhaseEnd) {
	if end != nil {
		end(e)
	}
}

func (g *Guard) storeCall(ctx context.Context, op httpidem.StoreOp, t0 time.Time, err error) {
	if g.Observer != nil {
		g.Observer.StoreCall(ctx, httpidem.StoreCall{Op: op, Duration: time.Since(t0), Err: err})
	}
}

func (g *Guard) complete(ctx context.Context, owner idem.Owner, data []byte) error {
	t0 := time.Now()
	err := g.Store.Complete(ctx, owner, data)
	g.storeCall(ctx, httpidem.OpComplete, t0, err)
	return err
}

func (g *Guard) release(ctx context.Context, owner idem.Owner) error {
	t0 := time.Now()
	err := g.Store.Release(ctx, owner)
	g.storeCall(ctx, httpidem.OpRelease, t0, err)
	return err
}

// claimDecision is what the store's answer to Begin means, for
// PhaseDecide's end.
func claimDecision(ctx context.Context, c idem.Claim, err error) httpidem.Decision {
	switch {
	case err != nil && ctx.Err() != nil:
		return httpidem.DecisionCanceled
	case err != nil:
		return httpidem.DecisionStoreError
	}
	switch c.Outcome {
	case idem.Acquired:
		return httpidem.DecisionAcquired
	case idem.Replay:
		return httpidem.DecisionReplayed
	case idem.Mismatch:
		return httpidem.DecisionMismatch
	case idem.InFlight:
		return httpidem.DecisionInFlight
	}
	return httpidem.DecisionStoreError
}
