package httpidem

import (
	"context"
	"encoding/hex"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// Observer watches a Middleware: each decision (for counters, audit and
// alerts) and each store call (for latency metrics); an Observer that is
// also a PhaseObserver sees the phases of each keyed request too (for
// tracing). Set it as Config.Observer; nil observes nothing and costs
// nothing. promidem and otelidem implement it for Prometheus and
// OpenTelemetry; ObserverFunc turns one function into a hook, and
// Observers combines several.
//
// The middleware never hands an Observer the raw key: only its digest
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
	// PhaseObserver, the context of PhaseComplete when the decision is made
	// while completing.
	Decided(ctx context.Context, e Event)
}

// PhaseObserver is an Observer that is told of the phases of each keyed
// request, as a tracer needs: a start, an end, and a context that the
// phase's store calls and, for PhaseWork, the handler inherit. The
// middleware checks for it once, in New; an Observer without it (a
// counter, a hook) costs no per-phase work.
type PhaseObserver interface {
	Observer
	// StartPhase is called as phase p of a keyed request starts, with the
	// context the phase would run with and the hashed key. It returns the
	// context the phase runs with instead: the store calls of the phase
	// use it, and for PhaseWork the handler's context is derived from it,
	// so spans the handler starts nest under the phase's. end, when not
	// nil, is called exactly once when the phase is over. Returning ctx
	// unchanged and a nil end is allowed.
	StartPhase(ctx context.Context, p Phase, key string) (_ context.Context, end func(PhaseEnd))
}

// Phase is a stretch of a keyed request's handling that an Observer can
// time and trace.
type Phase uint8

// Phases, in the order they run. A request refused or replayed by the
// store's decision has only PhaseDecide; an executed one has all three.
const (
	// PhaseDecide asks the store for the key: Store.Begin, and its polls
	// while the first request runs (Config.WaitTimeout).
	PhaseDecide Phase = iota + 1
	// PhaseWork runs the handler as the key's owner; with AtMostOnce,
	// Store.MarkStarted first, in the phase.
	PhaseWork
	// PhaseComplete stores the handler's result (Store.Complete) or gives
	// the claim up (Store.Release) and answers the client.
	PhaseComplete
)

func (p Phase) String() string {
	switch p {
	case PhaseDecide:
		return "decide"
	case PhaseWork:
		return "work"
	case PhaseComplete:
		return "complete"
	}
	return "invalid"
}

// PhaseEnd is what a phase came to.
type PhaseEnd struct {
	// Decision is, for PhaseDecide, what the store answered:
	// DecisionAcquired, DecisionReplayed, DecisionMismatch,
	// DecisionInFlight, or DecisionStoreError, DecisionFailOpen or
	// DecisionCanceled with Err. Zero for the other phases (the request's
	// decision is reported to Decided).
	Decision Decision
	// Status is, for PhaseWork, the status the handler wrote (0 if it
	// wrote none).
	Status int
	// Err is why the phase failed: a store error, a handler panic, the
	// cause given to OutcomeUnknown. Nil otherwise.
	Err error
}

// StoreCall is one store call made by the middleware.
type StoreCall struct {
	Op       StoreOp
	Duration time.Duration
	Err      error // as the store returned it
}

// Event is a decision, as Observer.Decided receives it. From grpcidem and
// connectidem, Method is the full method or procedure name, Path is empty
// and Status is the RPC status code answered (0 is OK).
type Event struct {
	Decision Decision
	// Digest is the key's digest (idem.Key.Digest, the SHA-256 of scope
	// and key that stores keep), zero when the request had no valid key.
	// Never the raw key; Key gives the short form the logs carry.
	Digest idem.Digest
	Method string
	Path   string // r.URL.Path
	// Status is the status the middleware sent: the replayed, refused or
	// first response's. 0 when the handler answered directly (keyless,
	// fail_open), for DecisionAcquired, and when nothing was sent (a
	// panic).
	Status int
	// Replayed reports that the answer is a stored response, sent with
	// Idempotent-Replayed: true.
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
	return shortDigest(e.Digest)
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
//	cfg.Observer = httpidem.ObserverFunc(func(ctx context.Context, e httpidem.Event) { … })
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

func (l multiPhaseObserver) StartPhase(ctx context.Context, p Phase, key string) (context.Context, func(PhaseEnd)) {
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

// phase starts p when a PhaseObserver is set; otherwise it returns ctx and
// a nil end.
func (m *Middleware) phase(ctx context.Context, p Phase, key idem.Key) (context.Context, func(PhaseEnd)) {
	if m.phases == nil {
		return ctx, nil
	}
	return m.phases.StartPhase(ctx, p, hashedKey(key))
}

// endPhase calls end, if any.
func endPhase(end func(PhaseEnd), e PhaseEnd) {
	if end != nil {
		end(e)
	}
}

// storeCall reports a store call that started at t0.
func (m *Middleware) storeCall(ctx context.Context, op StoreOp, t0 time.Time, err error) {
	if m.obs != nil {
		m.obs.StoreCall(ctx, StoreCall{Op: op, Duration: time.Since(t0), Err: err})
	}
}

// notify reports decision d to the observer.
func (m *Middleware) notify(r *http.Request, key idem.Key, d Decision, status int, err error) {
	if m.obs == nil {
		return
	}
	e := Event{Decision: d, Method: r.Method, Path: r.URL.Path, Status: status, Replayed: d == DecisionReplayed, Err: err}
	if !key.IsZero() {
		e.Digest = key.Digest()
	}
	m.obs.Decided(r.Context(), e)
}

// decideEnd is the PhaseEnd of PhaseDecide.
func (m *Middleware) decideEnd(ctx context.Context, c idem.Claim, err error) PhaseEnd {
	switch {
	case err == nil:
		switch c.Outcome {
		case idem.Acquired:
			return PhaseEnd{Decision: DecisionAcquired}
		case idem.Replay:
			return PhaseEnd{Decision: DecisionReplayed}
		case idem.Mismatch:
			return PhaseEnd{Decision: DecisionMismatch}
		case idem.InFlight:
			return PhaseEnd{Decision: DecisionInFlight}
		}
		return PhaseEnd{Decision: DecisionStoreError}
	case m.cfg.FailOpen && idem.IsUnavailable(err):
		return PhaseEnd{Decision: DecisionFailOpen, Err: err}
	case ctx.Err() != nil:
		return PhaseEnd{Decision: DecisionCanceled, Err: err}
	}
	return PhaseEnd{Decision: DecisionStoreError, Err: err}
}

// completing starts PhaseComplete. It returns the request with the phase's
// context (for the decision and the refusal), and the context the store
// calls run on, detached from the client's; without a PhaseObserver these
// are r and finish.
func (m *Middleware) completing(r *http.Request, key idem.Key, finish context.Context) (*http.Request, context.Context, func(PhaseEnd)) {
	if m.phases == nil {
		return r, finish, nil
	}
	ctx, end := m.phases.StartPhase(r.Context(), PhaseComplete, hashedKey(key))
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
