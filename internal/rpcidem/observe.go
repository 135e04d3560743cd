package rpcidem

import (
	"context"
	"errors"

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
