package observe

import (
	"context"
	"time"

	"github.com/idemkit/idem"
)

// ForAttempts adapts o to idem.AttemptObserver, for an adapter of
// protocol p built on idem.Claimer: the store calls and phases the claim
// engine reports reach o with p. It returns nil for a nil o, so that an
// adapter without an Observer makes no observation calls at all.
func ForAttempts(o Observer, p Protocol) idem.AttemptObserver {
	if o == nil {
		return nil
	}
	po, _ := o.(PhaseObserver)
	return &attempts{o: o, phases: po, protocol: p}
}

type attempts struct {
	o        Observer
	phases   PhaseObserver // o, if it is one
	protocol Protocol
}

func (a *attempts) StoreCall(ctx context.Context, m idem.StoreMethod, d time.Duration, err error) {
	a.o.StoreCall(ctx, StoreCall{Protocol: a.protocol, Op: m, Duration: d, Err: err})
}

func (a *attempts) StartPhase(ctx context.Context, p idem.AttemptPhase, key idem.Key) (context.Context, func(idem.PhaseReport)) {
	if a.phases == nil {
		return ctx, nil
	}
	ctx, end := a.phases.StartPhase(ctx, p, ShortDigest(key.Digest()))
	if end == nil {
		return ctx, nil
	}
	return ctx, func(r idem.PhaseReport) {
		e := PhaseEnd{Protocol: a.protocol, Status: r.Status, Err: r.Err}
		if p == idem.PhaseDecide {
			e.Decision = ClaimDecision(ctx, r.Claim, r.Err, r.FailOpen)
		}
		end(e)
	}
}

// ClaimDecision is what a Store.Begin answer (claim, err) means, as a
// decide phase's end reports it: acquired, replayed, mismatch, in_flight,
// or store_error, fail_open (failOpen and the store unreachable) or
// canceled (ctx ended).
func ClaimDecision(ctx context.Context, claim idem.Claim, err error, failOpen bool) Decision {
	switch {
	case err == nil:
		switch claim.Outcome {
		case idem.Acquired:
			return DecisionAcquired
		case idem.Replay:
			return DecisionReplayed
		case idem.Mismatch:
			return DecisionMismatch
		case idem.InFlight:
			return DecisionInFlight
		}
		return DecisionStoreError
	case failOpen && idem.IsUnavailable(err):
		return DecisionFailOpen
	case ctx.Err() != nil:
		return DecisionCanceled
	}
	return DecisionStoreError
}
