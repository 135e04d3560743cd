package httpidem

import (
	"context"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// phase starts p when a PhaseObserver is set; otherwise it returns ctx and
// a nil end.
func (m *Middleware) phase(ctx context.Context, p observe.Phase, key idem.Key) (context.Context, func(observe.PhaseEnd)) {
	if m.phases == nil {
		return ctx, nil
	}
	return m.phases.StartPhase(ctx, p, hashedKey(key))
}

// endPhase calls end, if any.
func endPhase(end func(observe.PhaseEnd), e observe.PhaseEnd) {
	if end != nil {
		e.Protocol = observe.ProtocolHTTP
		end(e)
	}
}

// storeCall reports a store call that started at t0.
func (m *Middleware) storeCall(ctx context.Context, op observe.StoreOp, t0 time.Time, err error) {
	if m.obs != nil {
		m.obs.StoreCall(ctx, observe.StoreCall{Protocol: observe.ProtocolHTTP, Op: op, Duration: time.Since(t0), Err: err})
	}
}

// notify reports decision d to the observer.
func (m *Middleware) notify(r *http.Request, key idem.Key, d observe.Decision, status int, err error) {
	if m.obs == nil {
		return
	}
	e := observe.Event{Protocol: observe.ProtocolHTTP, Decision: d, Method: r.Method, Path: r.URL.Path, Status: status, Replayed: d == observe.DecisionReplayed, Err: err}
	if !key.IsZero() {
		e.Digest = key.Digest()
	}
	m.obs.Decided(r.Context(), e)
}

// decideEnd is the PhaseEnd of PhaseDecide.
func (m *Middleware) decideEnd(ctx context.Context, c idem.Claim, err error) observe.PhaseEnd {
	switch {
	case err == nil:
		switch c.Outcome {
		case idem.Acquired:
			return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionAcquired}
		case idem.Replay:
			return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionReplayed}
		case idem.Mismatch:
			return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionMismatch}
		case idem.InFlight:
			return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionInFlight}
		}
		return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionStoreError}
	case m.cfg.FailOpen && idem.IsUnavailable(err):
		return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionFailOpen, Err: err}
	case ctx.Err() != nil:
		return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionCanceled, Err: err}
	}
	return observe.PhaseEnd{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionStoreError, Err: err}
}

// completing starts PhaseComplete. It returns the request with the phase's
// context (for the decision and the refusal), and the context the store
// calls run on, detached from the client's; without a PhaseObserver these
// are r and finish.
func (m *Middleware) completing(r *http.Request, key idem.Key, finish context.Context) (*http.Request, context.Context, func(observe.PhaseEnd)) {
	if m.phases == nil {
		return r, finish, nil
	}
	ctx, end := m.phases.StartPhase(r.Context(), observe.PhaseComplete, hashedKey(key))
	return r.WithContext(ctx), context.WithoutCancel(ctx), end
}

// hashedKey is key.String() (the first 16 hex digits of the digest) in
// one allocation instead of two.
func hashedKey(key idem.Key) string { return shortDigest(key.Digest()) }

func shortDigest(d idem.Digest) string {
	var b [16]byte
	hex.Encode(b[:], d[:8])
	return string(b[:])
}
