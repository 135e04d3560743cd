package observe

import (
	"context"
	"encoding/hex"
	"time"

	"github.com/idemkit/idem"
)

// Observer watches an adapter: each decision (for counters, audit and
// alerts) and each store call (for latency metrics); an Observer that is
// also a PhaseObserver sees the phases of each keyed request too (for
// tracing). Adapters take one in their configuration (httpidem.Config,
// grpcidem.Config, connectidem.Config); nil observes nothing
// and costs nothing. promidem and otelidem implement it for Prometheus and
// OpenTelemetry; ObserverFunc turns one function into a hook, and
// Observers combines several.
//
// An Observer is never handed the raw key: only its digest
// (Event.Digest) and the short hashed form the log lines carry
// (Event.Key, the key argument of StartPhase).
//
// Methods are called on the request's goroutine and must return quickly
// and be safe for concurrent use. Embed NopObserver to implement only one
// of them.
type Observer interface {
	// StoreCall reports one store call after it returned, with the
	// context it was made with.
	StoreCall(ctx context.Context, c StoreCall)
	// Decided reports a decision: exactly one final decision per protected
	// request (Decision.Final), and DecisionAcquired before it when the
	// claim was granted. ctx is the request's context, or, for a
	// PhaseObserver, the context of idem.PhaseComplete when the decision is made
	// while completing.
	Decided(ctx context.Context, e Event)
}

// PhaseObserver is an Observer that is told of the phases of each keyed
// request, as a tracer needs: a start, an end, and a context that the
// phase's store calls and, for idem.PhaseWork, the protected work inherit. An
// adapter checks for it once, when it is built; an Observer without it (a
// counter, a hook) costs no per-phase work.
type PhaseObserver interface {
	Observer
	// StartPhase is called as phase p of a keyed request starts, with the
	// context the phase would run with and the hashed key. It returns the
	// context the phase runs with instead: the store calls of the phase
	// use it, and for idem.PhaseWork the work's context is derived from it, so
	// spans the work starts nest under the phase's. end, when not nil, is
	// called exactly once when the phase is over. Returning ctx unchanged
	// and a nil end is allowed.
	StartPhase(ctx context.Context, p idem.AttemptPhase, key string) (_ context.Context, end func(PhaseEnd))
}

// PhaseEnd is what a phase came to.
type PhaseEnd struct {
	// Protocol is the adapter's protocol.
	Protocol Protocol
	// Decision is, for idem.PhaseDecide, what the store answered:
	// DecisionAcquired, DecisionReplayed, DecisionMismatch,
	// DecisionInFlight, or DecisionStoreError, DecisionFailOpen or
	// DecisionCanceled with Err. Zero for the other phases (the request's
	// decision is reported to Decided).
	Decision Decision
	// Status is, for idem.PhaseWork, what the work answered: over HTTP the
	// status the handler wrote (0 if it wrote none), over gRPC and Connect
	// the status code (0 is OK; not set when Err is a panic). Zero for the
	// other phases and for Do.
	Status int
	// Err is why the phase failed: a store error, a panic, the cause given
	// to httpidem.OutcomeUnknown. Nil otherwise.
	Err error
}

// StoreCall is one store call made by an adapter.
type StoreCall struct {
	Protocol Protocol
	Op       idem.StoreMethod
	Duration time.Duration
	Err      error // as the store returned it
}

// Event is a decision, as Observer.Decided receives it.
//
// Over HTTP, Method and Path are the request's and Status is the HTTP
// status sent. Over gRPC and Connect, Method is the full method or
// procedure name, Path is empty and Status is the RPC status code
// answered (0 is OK).
type Event struct {
	Protocol Protocol
	Decision Decision
	// Digest is the key's digest (idem.Key.Digest, the SHA-256 of scope
	// and key that stores keep), zero when the request had no valid key.
	// Never the raw key; Key gives the short form the logs carry.
	Digest idem.Digest
	Method string
	Path   string
	// Status is the status the adapter answered: the replayed, refused or
	// first answer's. 0 when the work answered directly (keyless,
	// fail_open), for DecisionAcquired, and when nothing was sent (a
	// panic).
	Status int
	// Replayed reports that the answer is a stored one (sent with
	// Idempotent-Replayed: true over HTTP and RPC).
	Replayed bool
	// Err is the error behind the decision (store failure, panic, unknown
	// outcome's cause, unreadable body), or nil.
	Err error
}

// Key returns the hashed key as the log lines carry it
// (idem.Key.String: the first 16 hex digits of Digest), or "" when the
// request had no valid key. It is computed on each call: an observer that
// does not want it does not pay for it.
func (e Event) Key() string {
	if e.Digest == (idem.Digest{}) {
		return ""
	}
	return ShortDigest(e.Digest)
}

// ShortDigest is the hashed key of a digest as log lines and phases carry
// it (idem.Key.String): its first 16 hex digits, in one allocation.
func ShortDigest(d idem.Digest) string {
	var b [16]byte
	hex.Encode(b[:], d[:8])
	return string(b[:])
}

// NopObserver observes nothing. Embed it in an Observer that implements
// only one of the methods.
type NopObserver struct{}

// StoreCall does nothing.
func (NopObserver) StoreCall(context.Context, StoreCall) {}

// Decided does nothing.
func (NopObserver) Decided(context.Context, Event) {}

// ObserverFunc is a hook on decisions: an Observer whose Decided calls f
// (and whose other methods do nothing).
//
//	cfg.Observer = observe.ObserverFunc(func(ctx context.Context, e observe.Event) { … })
type ObserverFunc func(ctx context.Context, e Event)

// StoreCall does nothing.
func (ObserverFunc) StoreCall(context.Context, StoreCall) {}

// Decided calls f.
func (f ObserverFunc) Decided(ctx context.Context, e Event) { f(ctx, e) }

// Observers combines observers into one that calls each in turn; nil ones
// are left out. It is a PhaseObserver when one of them is: each phase's
// context is handed from one PhaseObserver to the next, and the end funcs
// run in the reverse order, as deferred calls do.
func Observers(obs ...Observer) Observer {
	list := make(multiObserver, 0, len(obs))
	var phased []PhaseObserver
	for _, o := range obs {
		if o != nil {
			list = append(list, o)
			if po, ok := o.(PhaseObserver); ok {
				phased = append(phased, po)
			}
		}
	}
	switch {
	case len(list) == 0:
		return NopObserver{}
	case len(list) == 1:
		return list[0]
	case len(phased) > 0:
		return multiPhaseObserver{list, phased}
	}
	return list
}

type multiObserver []Observer

type multiPhaseObserver struct {
	multiObserver
	phased []PhaseObserver
}

func (l multiPhaseObserver) StartPhase(ctx context.Context, p idem.AttemptPhase, key string) (context.Context, func(PhaseEnd)) {
	var ends []func(PhaseEnd)
	for _, o := range l.phased {
		var end func(PhaseEnd)
		if ctx, end = o.StartPhase(ctx, p, key); end != nil {
			ends = append(ends, end)
		}
	}
	if len(ends) == 0 {
		return ctx, nil
	}
	return ctx, func(e PhaseEnd) {
		for i := len(ends) - 1; i >= 0; i-- {
			ends[i](e)
		}
	}
}

func (l multiObserver) StoreCall(ctx context.Context, c StoreCall) {
	for _, o := range l {
		o.StoreCall(ctx, c)
	}
}

func (l multiObserver) Decided(ctx context.Context, e Event) {
	for _, o := range l {
		o.Decided(ctx, e)
	}
}
