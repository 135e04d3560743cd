package httpidem

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// exchange is one protected request's state while the middleware handles
// it: what it answers on, the key once known, and the request body once
// read. Every refusal goes through it, and so gives the pooled body
// buffer back exactly once; it lives on the stack.
type exchange struct {
	m    *Middleware
	w    http.ResponseWriter
	r    *http.Request // in the complete phase, with its context
	next http.Handler
	key  idem.Key         // zero until the key and scope are known
	fp   idem.Fingerprint // the request's, once known

	body   []byte    // the request body as read
	fpBody []byte    // body decoded for the fingerprint (gzip), else body
	bufp   *[]byte   // body's pooled buffer, until handed off or put back
	budget charge    // the request's bytes in the memory budget
	rec    *recorder // the handler's response, once it runs
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods.has(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	if m.cfg.SkipFunc != nil && m.cfg.SkipFunc(r) {
		m.decided(r, idem.Key{}, outcomeSkipped, nil)
		next.ServeHTTP(w, r)
		return
	}
	x := exchange{m: m, w: w, r: r, next: next, budget: charge{b: m.budget, ctx: r.Context()}}
	defer x.budget.done()
	lines := r.Header[m.header]
	switch len(lines) {
	case 0:
		if m.cfg.KeyPointer != "" {
			x.serveBodyKey()
			return
		}
		if m.cfg.RequireKey {
			x.refuse(probMissingKey, "send an "+m.cfg.Header+" header", nil)
			return
		}
		m.decided(r, idem.Key{}, outcomeKeyless, nil)
		next.ServeHTTP(w, r)
		return
	case 1:
	default:
		x.refuse(probMultipleKeys, "send exactly one "+m.cfg.Header+" header line", nil)
		return
	}
	id, err := ParseKey(lines[0])
	if err != nil {
		x.refuse(probInvalidKey, err.Error(), nil)
		return
	}
	if !x.setKey(id) || !x.readBody() {
		return
	}
	x.protect()
}

// serveBodyKey serves a protected request without the key header when the
// key is read from the body (Config.KeyPointer). A body that carries no key
// (not JSON, or nothing at the pointer) is a request without a key:
// RequireKey decides, as it does for a request without the header. A value
// at the pointer that is not a valid key is always refused: the client
// meant to send one. So is a body that is not valid JSON (a duplicate
// member, trailing bytes, invalid UTF-8, nesting too deep) but has a value
// at the pointer when read leniently (see bodyNamesKey).
func (x *exchange) serveBodyKey() {
	m := x.m
	if !x.readBody() {
		return
	}
	cost := jsonCost(len(x.fpBody))
	if !x.budget.take(cost) {
		x.overBudget()
		return
	}
	id, err := idem.KeyFromJSON("", x.fpBody, m.cfg.KeyPointer)
	x.budget.give(cost)
	if err != nil {
		noKey := errors.Is(err, idem.ErrInvalidJSON) || errors.Is(err, idem.ErrKeyNotFound)
		switch {
		case errors.Is(err, idem.ErrInvalidJSON) && bodyNamesKey(x.fpBody, m.cfg.KeyPointer):
			// A key the body cannot be fingerprinted around binds all
			// the same: refused, never run unprotected.
			x.refuse(probBodyNotJSON, "the body carries a key at "+m.cfg.KeyPointer+" but is not exactly one valid JSON value in UTF-8", err)
		case noKey && !m.cfg.RequireKey:
			m.decided(x.r, idem.Key{}, outcomeKeyless, nil)
			x.next.ServeHTTP(x.w, withBody(x.r.Context(), x.r, x.handOff(), nil))
		case errors.Is(err, idem.ErrInvalidJSON):
			x.refuse(probBodyNotJSON, "send an "+m.cfg.Header+" header, or a JSON body with the key at "+m.cfg.KeyPointer, err)
		case errors.Is(err, idem.ErrKeyNotFound):
			x.refuse(probMissingKey, "send an "+m.cfg.Header+" header, or the key at "+m.cfg.KeyPointer+" in the JSON body", nil)
		default:
			x.refuse(probInvalidKey, err.Error(), nil)
		}
		return
	}
	if x.setKey(id.ID()) {
		x.protect()
	}
}

// setKey sets the key of a validated id in the request's scope, or
// refuses the request (no or bad scope, an Upgrade) and reports false.
func (x *exchange) setKey(id string) bool {
	m, r := x.m, x.r
	scope, err := m.cfg.ScopeFunc(r)
	switch {
	case errors.Is(err, ErrScopeRequired) || (err == nil && scope == "" && !m.cfg.SharedAnonymousScope):
		x.refuse(probScopeRequired, "send the request with the caller's credentials", nil)
		return false
	case err != nil:
		x.refuse(probScope, "", err)
		return false
	}
	key, err := idem.NewKey(scope, id)
	if err != nil { // the id was validated: the scope is too long
		x.refuse(probScope, "", err)
		return false
	}
	x.key = key
	// A keyed request that asks for an Upgrade is refused before anything
	// reaches the handler: the upgraded connection would have no response
	// to store.
	if len(r.Header["Upgrade"]) > 0 {
		x.refuse(probUpgrade, "send the request without Upgrade, or without "+m.cfg.Header, nil)
		return false
	}
	return true
}

// readBody reads the request body (see Middleware.readBody) and, for gzip,
// decodes it for the fingerprint. It reports false when it refused the
// request.
func (x *exchange) readBody() bool {
	body, bufp, p, err := x.m.readBody(x.r, &x.budget)
	x.body, x.fpBody, x.bufp = body, body, bufp
	if p == &probBusy {
		x.overBudget()
		return false
	}
	if p != nil {
		x.refuse(*p, "", err)
		return false
	}
	if len(body) > 0 && gzipped(x.r) {
		// Fingerprinted on what it says, not on how it was compressed;
		// the handler gets the bytes as sent.
		if x.fpBody, p, err = x.m.gunzip(body, &x.budget); p == &probBusy {
			x.overBudget()
			return false
		} else if p != nil {
			x.refuse(*p, "", err)
			return false
		}
	}
	return true
}

// overBudget refuses a request that found the memory budget full: 503
// with Retry-After; a request that could never fit in it got 413 instead
// (readBody). Nothing is recorded.
func (x *exchange) overBudget() {
	if x.budget.over == &probBodyTooLarge {
		x.refuse(probBodyTooLarge, "the request needs more memory than the whole budget", nil)
		return
	}
	x.dropBody()
	x.answer(probBusy, probBusy.answer("the request memory budget is exhausted; retry after Retry-After seconds", x.m.cfg.StoreRetryAfter, 0), nil)
}

// handOff returns the body for the handler. Its buffer is never pooled
// again (a transport may still read it after the handler returned); its
// holder goes back, empty.
func (x *exchange) handOff() []byte {
	if x.bufp != nil {
		*x.bufp = nil
		reqBufPool.Put(x.bufp)
		x.bufp = nil
	}
	return x.body
}

// dropBody puts the body's buffer back in the pool, once.
func (x *exchange) dropBody() {
	putBody(x.bufp, x.body)
	x.bufp, x.body, x.fpBody = nil, nil, nil
}

// protect fingerprints a keyed request whose body is read and claims,
// executes, replays or refuses it.
func (x *exchange) protect() {
	m, r := x.m, x.r
	var cost int64
	if len(x.fpBody) > 0 && (m.cfg.JSONFingerprint || len(m.cfg.FingerprintPointers) > 0) {
		cost = jsonCost(len(x.fpBody))
	}
	if !x.budget.take(cost) {
		x.overBudget()
		return
	}
	fp, err := m.requestFingerprint(r, x.fpBody)
	x.budget.give(cost)
	if err != nil {
		x.refuse(probBodyNotJSON, "the body must be JSON: the fingerprint covers values in it", err)
		return
	}
	x.fp = fp
	t, err := m.claimer.Begin(r.Context(), idem.BeginRequest{Key: x.key, Fingerprint: fp, Lease: m.cfg.Lease, Retention: m.cfg.Retention})
	switch {
	case err != nil && m.cfg.FailOpen && idem.IsUnavailable(err):
		m.decided(r, x.key, outcomeFailOpen, err)
		x.next.ServeHTTP(x.w, withBody(r.Context(), r, x.handOff(), nil))
	case err != nil:
		x.unavailable(probStoreUnavailable, err)
	case t.Outcome == idem.Acquired:
		m.notify(r, x.key, observe.DecisionAcquired, 0, nil)
		x.execute(t)
	case t.Outcome == idem.Replay:
		x.dropBody()
		x.replay(t.Result)
	case t.Outcome == idem.Mismatch:
		x.refuse(probMismatch, "this key was used for a request with another method, path, query or body", nil)
	case t.Outcome == idem.InFlight:
		x.dropBody()
		x.answer(probInFlight, probInFlight.answer("retry with the same key after Retry-After seconds", min(t.RetryAfter, m.cfg.InFlightRetryAfter), 0), nil)
	default:
		x.unavailable(probStoreUnavailable, errors.New("httpidem: store returned an invalid outcome"))
	}
}

func (x *exchange) replay(data []byte) {
	// A replayable record's headers are decoded straight into w's.
	// data is the store's answer (Claim.Result), read-only and never
	// changed: the decoded strings may alias it.
	resp, err := decodeResponseAlias(data, x.w.Header())
	if err != nil {
		x.refuse(probRecordUnreadable, "", err)
		return
	}
	if resp.NotReplayable {
		x.answer(probNotReplayable, probNotReplayable.answer("the operation completed, but its response was streamed or too large to store; it will not run again", 0, resp.Status), nil)
		return
	}
	if resp.OutcomeUnknown {
		// What operators see of a held key, never sent (see StoredResponse).
		var step idem.HeldStep
		if v := x.w.Header()[heldStepHeader]; len(v) == 1 && json.Unmarshal([]byte(v[0]), &step) != nil {
			step = idem.HeldStep{}
		}
		delete(x.w.Header(), heldRequestHeader)
		delete(x.w.Header(), heldScopeHeader)
		delete(x.w.Header(), heldStepHeader)
		if x.m.resolver != nil {
			// The process that held the key may have died before the
			// service answered it: ask (once at a time per process).
			x.m.resolver.follow(x.r, x.key, idem.Owner{Key: x.key}, x.fp, step)
		}
	}
	if ok, detail := x.m.replayable(x.r, x.w.Header(), &resp); !ok {
		clear(x.w.Header())
		x.refuse(probEncodingNotAccepted, detail, nil)
		return
	}
	// The stored headers are in place; a replay carries
	// Idempotent-Replayed: true.
	x.w.Header()[ReplayedHeader] = replayedTrue
	sendResponse(x.w, &resp)
	x.m.decidedStatus(x.r, x.key, outcomeReplayed, resp.Status, nil)
}

// execute runs the handler as the owner of the claim t and stores what it
// answers.
func (x *exchange) execute(t idem.Ticket) {
	m, r := x.m, x.r
	body := x.handOff()
	rec := &recorder{m: m, w: x.w, method: r.Method}
	if h := x.w.Header(); h != nil && len(h) == 0 {
		// The handler sets its headers straight into w's (empty) map:
		// nothing is copied to send them. Nothing is sent before the
		// result is stored, and an answer of the middleware's own clears
		// them first (clearHandlerHeader).
		rec.header, rec.shared = h, true
	} else {
		rec.header = make(http.Header)
	}
	x.rec = rec
	a := &rec.attempt
	// The handler sees the client's cancellation, as usual, and also a lost
	// lease (another owner took over): its result can no longer be stored.
	hctx, err := a.Start(r.Context(), &m.claimer, t)
	if err != nil {
		x.inPhase(hctx)
		if errors.Is(err, idem.ErrOutcomeUnknown) {
			// A previous holder started this request and lost its claim
			// without a result: it may have had its effects. Never again.
			x.settleUnknown(a, true, err)
		} else { // the mark failed: nothing ran, the claim is released
			x.unavailable(probStoreUnavailable, err)
		}
		a.End()
		return
	}
	if t.Takeover {
		hctx = context.WithValue(hctx, reexecKey{}, true)
	}
	// One allocation: the context that carries the request's fingerprint
	// (RequestFingerprint) by value, so that nothing else escapes.
	hctx = &fingerprintCtx{Context: hctx, fp: x.fp}
	rec.getBuffer()
	// A handler that panics (or calls runtime.Goexit): before it wrote
	// anything, no result exists, so the claim is released and a retry
	// runs it again. After it started its answer, the outcome is unknown
	// (UnknownOutcome decides). Streamed: its not-replayable marker
	// stands. Whoever answers the panic does not send its headers.
	a.Run(r.Context(), func() { x.next.ServeHTTP(rec, withBody(hctx, r, body, &rec.reqBody)) }, func() (int, error) {
		x.clearHandlerHeader()
		return rec.status, errHandlerPanicked
	}, func(fctx context.Context) {
		x.inPhase(fctx)
		switch {
		case rec.completed:
			m.decidedStatus(x.r, x.key, outcomeExecuted, rec.status, errHandlerPanicked)
		case !rec.stream && (rec.wrote || len(rec.body) > 0 || rec.unknown != nil):
			x.settleUnknown(a, false, errHandlerPanicked)
		default:
			x.release(a)
			m.decided(x.r, x.key, outcomeReleased, errHandlerPanicked)
		}
	})
	a.WorkDone(rec.status, rec.unknown)
	x.inPhase(a.Finishing(r.Context()))
	x.finish(a, rec)
	a.End()
	// The response is sent (or stored, or given up): the capture buffer
	// goes back to the pool. A handler that (against the net/http rules)
	// writes after returning gets a fresh buffer, never this one.
	rec.recycle()
}

var errHandlerPanicked = errors.New("handler panicked")

// inPhase makes ctx, the complete phase's context, the request's for the
// answer and the decision (no copy when it is the request's already).
func (x *exchange) inPhase(ctx context.Context) {
	if ctx != x.r.Context() {
		x.r = x.r.WithContext(ctx)
	}
}

// finish stores (or releases) what the handler produced, then answers.
func (x *exchange) finish(a *idem.Attempt, rec *recorder) {
	m, w, r := x.m, x.w, x.r
	switch {
	case rec.failed != nil: // the not-replayable marker could not be stored
		x.unavailable(probNotStored, rec.failed)
		return
	case rec.unknown != nil:
		x.settleUnknown(a, true, rec.unknown)
		return
	case rec.notSent:
		x.release(a)
		resp := rec.response()
		writeResponse(w, resp)
		m.decidedStatus(r, x.key, outcomeReleased, resp.Status, nil)
		return
	case rec.stream:
		if rec.completed {
			m.decidedStatus(r, x.key, outcomeExecuted, rec.status, errStreamed)
		} else {
			x.release(a)
			m.decidedStatus(r, x.key, outcomeReleased, rec.status, nil)
		}
		return
	}
	resp := rec.response()
	if !m.cfg.StoreStatusFunc(resp.Status) {
		x.release(a)
		writeFirst(w, resp, rec.trailers())
		m.decidedStatus(r, x.key, outcomeReleased, resp.Status, nil)
		return
	}
	stored := resp
	if m.dropsAny(resp.Header) {
		stored = &storedResponse{Status: resp.Status, Header: resp.Header.Clone(), Body: resp.Body}
		for _, h := range m.drop {
			delete(stored.Header, h)
		}
	}
	err := a.Complete(encodeResponse(stored), nil)
	if errors.Is(err, idem.ErrResultTooLarge) {
		// The store's own limit is below MaxResponse: keep the protection,
		// lose only the replay.
		err = a.Complete(encodeResponse(&storedResponse{Status: stored.Status, Header: stored.Header, NotReplayable: true}), nil)
	}
	if err != nil {
		x.unavailable(probNotStored, err)
		return
	}
	writeFirst(w, resp, rec.trailers())
	m.decidedStatus(r, x.key, outcomeExecuted, resp.Status, nil)
}

// settleUnknown applies the UnknownOutcome policy and, when answer is
// true, answers with the outcome-unknown problem.
func (x *exchange) settleUnknown(a *idem.Attempt, answer bool, cause error) {
	m := x.m
	resp := m.unknownProblem(x.r, cause)
	if m.cfg.UnknownOutcome == ReleaseUnknown {
		x.release(a)
	} else {
		resp.OutcomeUnknown = true
		step := causeStep(cause)
		if err := a.Hold(encodeResponse(heldRecord(resp, x.r, x.key.Scope(), step))); err != nil {
			// The claim stays until its lease runs out.
			if answer {
				x.unavailable(probNotStored, err)
			} else {
				m.decided(x.r, x.key, outcomeStoreError, err)
			}
			return
		}
		if m.resolver != nil {
			m.resolver.follow(x.r, x.key, a.Owner(), x.fp, step) // ask the service (resolver.go)
		}
	}
	status := 0
	if answer {
		x.clearHandlerHeader()
		writeResponse(x.w, resp)
		status = resp.Status
	}
	m.decidedStatus(x.r, x.key, outcomeUnknown, status, cause)
}

// release gives the claim up so a retry runs. A failure only delays that
// retry until the lease runs out, so it is logged and not returned.
func (x *exchange) release(a *idem.Attempt) {
	if err := a.Release(); err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		x.m.log.LogAttrs(x.r.Context(), slog.LevelWarn, "idempotency claim not released; retries wait for its lease to run out",
			slog.String("key", x.key.String()), slog.String("error", err.Error()))
	}
}

// refuse answers with problem p (detail for the client) and records the
// decision.
func (x *exchange) refuse(p problem, detail string, err error) {
	x.dropBody()
	x.answer(p, p.answer(detail, 0, 0), err)
}

// unavailable refuses with p, a store failure: Retry-After is the
// configured StoreRetryAfter.
func (x *exchange) unavailable(p problem, err error) {
	x.dropBody()
	x.answer(p, p.answer("", x.m.cfg.StoreRetryAfter, 0), err)
}

// answer sends the refusal ans of problem p and records the decision; a
// store failure after the client left is recorded as canceled.
func (x *exchange) answer(p problem, ans Problem, err error) {
	x.clearHandlerHeader()
	x.m.writeRefusal(x.w, x.r, ans)
	o := p.outcome
	if o == outcomeStoreError && x.r.Context().Err() != nil {
		o = outcomeCanceled
	}
	x.m.decidedStatus(x.r, x.key, o, p.status, err)
}

// clearHandlerHeader removes the headers the handler set from w's map
// (when it set them there: recorder.shared) before the middleware answers
// with something else, unless they were sent already (streaming).
func (x *exchange) clearHandlerHeader() {
	if rec := x.rec; rec != nil && rec.shared && !rec.stream {
		clear(x.w.Header())
	}
}
