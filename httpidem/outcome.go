package httpidem

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// UnknownOutcomePolicy says what happens to a key whose request may have
// had its effects, but whose result is not known: the handler reported
// OutcomeUnknown (idem proxy does for an upstream that closed, reset or
// timed out after the request was sent), or it panicked after it had
// started its response.
type UnknownOutcomePolicy uint8

const (
	// HoldUnknown (the default) stores an outcome-unknown problem as the
	// key's result: the first caller gets 502 (504 after a timeout), and
	// every retry with the key gets the same answer replayed, with
	// Idempotent-Replayed: true. The operation never runs again for that
	// key within the retention: the client must find out what happened
	// (look the resource up) or, knowingly, use a new key.
	HoldUnknown UnknownOutcomePolicy = iota
	// ReleaseUnknown releases the claim: the next retry runs again. Use it
	// only when the service deduplicates on the forwarded key itself.
	ReleaseUnknown
)

func (p UnknownOutcomePolicy) String() string {
	switch p {
	case HoldUnknown:
		return "hold"
	case ReleaseUnknown:
		return "release"
	}
	return "invalid"
}

// ErrUpstreamTimeout is a cause for OutcomeUnknown: the answer did not
// arrive in time. The outcome-unknown answer is then 504 instead of 502
// (so is any cause that errors.Is context.DeadlineExceeded or that has a
// Timeout() method reporting true).
var ErrUpstreamTimeout = errors.New("httpidem: no complete answer in time")

// NotSent tells the middleware that the protected operation did not start
// (the service behind a proxy could not be reached: nothing was sent): the
// claim is released whatever the handler answers, so the retry runs, even
// when the answer's status would be stored (StripeStoreStatus). The handler
// still writes its answer (idem proxy writes a 502 upstream-unreachable
// problem with Retry-After).
//
// w is the ResponseWriter the handler received (or one that unwraps to
// it, see http.ResponseController). NotSent reports false when w is not a
// protected request's writer (the request was not protected: nothing to
// release) or when the response is already streaming.
func NotSent(w http.ResponseWriter) bool {
	rec := recorderOf(w)
	if rec == nil || rec.stream {
		return false
	}
	rec.notSent = true
	return true
}

// OutcomeUnknown tells the middleware that the operation may have had its
// effects but its result is unknown (the request reached the service and
// no complete answer came back). The handler must not write anything
// after it: whatever it wrote is discarded, and the middleware answers
// with an outcome-unknown problem (502, or 504 when cause is a timeout)
// and applies Config.UnknownOutcome (hold: that problem is stored and
// replayed to every retry; release: the claim is released). When cause
// names the step of an operation of steps the key is held in (a
// *step.UnknownError: it has a HeldStep() idem.HeldStep method), the held
// record names it (StoredResponse.Step) and so does the resolve question
// (ResolveQuestion.Step).
//
// It reports false when w is not a protected request's writer, or when
// the response is already streaming (past MaxResponse); the handler then
// answers as it would without the middleware.
func OutcomeUnknown(w http.ResponseWriter, cause error) bool {
	rec := recorderOf(w)
	if rec == nil || rec.stream {
		return false
	}
	if cause == nil {
		cause = errUnknown
	}
	rec.unknown = cause
	return true
}

var errUnknown = errors.New("httpidem: outcome unknown")

// recorderOf finds the middleware's recorder under w.
func recorderOf(w http.ResponseWriter) *recorder {
	for {
		switch x := w.(type) {
		case *recorder:
			return x
		case interface{ Unwrap() http.ResponseWriter }:
			w = x.Unwrap()
		default:
			return nil
		}
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, ErrUpstreamTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// unknownProblem is the answer for an unknown outcome to r, as it is sent
// and (in hold mode) stored: in the API's error shape (RefusalFunc) when
// there is one.
func (m *Middleware) unknownProblem(r *http.Request, cause error) *storedResponse {
	p := probOutcomeUnknown
	detail := "the request reached the service but no complete answer came back; it may have been executed"
	if errors.Is(cause, idem.ErrOutcomeUnknown) {
		detail = "a previous attempt with this key reached the service and its proxy or process stopped before the answer was stored; it may have been executed"
	} else if isTimeout(cause) {
		p = probOutcomeUnknownTimeout
		detail = "the request reached the service but no answer came back in time; it may have been executed"
	}
	var retry time.Duration
	if m.cfg.UnknownOutcome == ReleaseUnknown {
		detail += "; a retry with this key runs it again"
		retry = time.Second
	} else {
		detail += "; every retry with this key gets this answer: look the operation up, or use a new key knowingly"
	}
	return m.renderRefusal(r, Problem{Type: p.typ, Title: p.title, Status: p.status, Detail: detail, RetryAfter: retry})
}

// reexecKey marks the context of a handler that runs after a takeover.
type reexecKey struct{}

// fingerprintKey carries the fingerprint of the request a protected
// handler runs for.
type fingerprintKey struct{}

// RequestFingerprint returns the fingerprint of the request whose key the
// protected handler (ctx is its request's context) runs under: what a
// service may keep with its record, so that its resolve answers can
// carry it (ResolveAnswer.Fingerprint). idem proxy sends it as
// Idempotency-Fingerprint.
func RequestFingerprint(ctx context.Context) (idem.Fingerprint, bool) {
	c, ok := ctx.Value(fingerprintKey{}).(*fingerprintCtx)
	if !ok {
		return idem.Fingerprint{}, false
	}
	return c.fp, true
}

// fingerprintCtx is a protected handler's context: its parent, plus the
// request's fingerprint for RequestFingerprint, held by value so that
// carrying it costs one allocation (context.WithValue would box the
// fingerprint too); cancellation and every other value are the parent's.
type fingerprintCtx struct {
	context.Context
	fp idem.Fingerprint
}

func (c *fingerprintCtx) Value(key any) any {
	if _, ok := key.(fingerprintKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// IsReexecution reports whether ctx is the context of a protected handler
// that runs after a takeover: a previous holder of the key's claim died or
// lost its lease, and may have done the work already. A handler (or a
// proxied service: idem proxy sends Idempotency-Reexecution: true) that
// keeps its own records should check them for the key before acting.
func IsReexecution(ctx context.Context) bool {
	v, _ := ctx.Value(reexecKey{}).(bool)
	return v
}
