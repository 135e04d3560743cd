package idem

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"
)

// Claimer runs idem's claim sequence for one adapter: claim → heartbeat →
// mark started → run → complete, release or hold as outcome-unknown. Do,
// httpidem's middleware and the gRPC and Connect interceptors are all
// built on it; an adapter for another protocol (a message consumer, a job
// runner) should be too, and keep to its own protocol: where the key and
// scope come from, how a result is encoded, what each answer is called.
//
// A Claimer is configuration: set its fields once and share it; it is
// safe for concurrent use. The zero value is not usable: Store must be
// set.
//
// One protected operation goes like this:
//
//	t, err := c.Begin(ctx, req)            // Acquired, Replay, InFlight, Mismatch, or a store error
//	// … not Acquired: answer from t.Claim (replay, refuse) and stop here.
//	var a idem.Attempt                     // or a field of the adapter's per-request state
//	wctx, err := a.Start(ctx, c, t)
//	if err != nil { … }                    // ErrOutcomeUnknown (a.Hold), or the mark failed (released); wctx is then the complete phase's
//	a.Run(ctx, func() { result = work(wctx) }, abandoned, settle) // a panic: Run finishes the claim with settle (Release or Hold)
//	a.WorkDone(status, nil)
//	fctx := a.Finishing(ctx)
//	err = a.Complete(encode(result), notReplayableMarker) // or a.Release(), a.Hold(unknown)
//	// … answer the caller (observe its decision with fctx), then:
//	a.End()
type Claimer struct {
	Store Store
	// Observer, when set, is told of each store call and each phase
	// (observe.ForAttempts makes one of an observe.Observer); the
	// decisions are the adapter's to report, since they carry its
	// protocol's answer.
	Observer AttemptObserver
	// AtMostOnce: Start marks the claim started (Store.MarkStarted)
	// before the work runs, and refuses to run the work of a claim taken
	// over from a holder that had marked it (ErrOutcomeUnknown).
	AtMostOnce bool
	// Wait is how long Begin keeps polling while another caller holds the
	// key: zero not at all, negative until ctx ends.
	Wait time.Duration
	// PollInterval is the first wait between polls; it doubles up to one
	// second, and never exceeds the lease the holder has left. Zero means
	// 25ms.
	PollInterval time.Duration
	// FailOpen is passed on in the decide phase's PhaseReport: the adapter
	// runs the work unprotected when the store is unreachable.
	FailOpen bool
	// StoreTimeout, when positive, is the deadline of each store call
	// (each Begin and poll, the mark, Complete, Release, Hold), on top of
	// the caller's: a store that stops answering (a black-holed
	// connection) fails the call with an error matching ErrUnavailable
	// after it, never a hang. Zero: the caller's context alone bounds
	// Begin and the mark; finishing is bounded by FinishGrace.
	//
	// A store whose own type has an InProcess() bool method that returns
	// true (memstore: it keeps its records in this process and never
	// waits) gets neither deadline, which would cost a timer per call and
	// bound nothing; a wrapper that holds it as an idem.Store keeps them.
	//
	// It may be longer than the lease. The calls that rely on the lease
	// (the mark, Complete, Release, Hold) run while the heartbeat renews
	// it, so a slow call does not lose the claim by being slow; a renewal
	// (Store.Extend) is bounded by a third of the lease instead. When the
	// renewals fail too, so that the lease may run out while such a call
	// is on its way, the store decides: its writes are conditional on the
	// owner's fence, so a call that arrives after another caller took the
	// key over fails with ErrLeaseLost and changes nothing.
	StoreTimeout time.Duration
	// FinishGrace bounds Complete, Release and Hold: they are detached
	// from the caller's cancellation (a caller that went away finds its
	// result stored when it retries), and run until the caller's deadline
	// or until FinishGrace after finishing began, whichever is later.
	// Within that bound a store call that certainly never reached the
	// server (connection refused) is tried again. Zero means
	// DefaultFinishGrace.
	FinishGrace time.Duration
}

// inProcessStore is the capability of a Store that keeps its records in
// this process's memory and never waits in a call: no network, no disk,
// no channel, only a short lock of its own (memstore). Such a store
// cannot stop answering, so a Claimer gives its calls no deadline of
// their own (StoreTimeout, the finishing bound of FinishGrace), which
// would cost a timer per call and bound nothing; the caller's context
// still reaches every call. Every other store, including a wrapper
// around an in-process store, keeps the deadlines: the capability is a
// method of the store's own type, which a wrapper that holds the store
// as an idem.Store does not have. A type that embeds an in-process store
// and makes a call wait (a network hop, a fault injector) must report
// false. The interface is unexported: a store has the capability by
// having the method (memstore.Store.InProcess), and nothing outside the
// engine needs to name it.
type inProcessStore interface {
	Store
	// InProcess reports whether every call returns without waiting on
	// anything outside the store's own short locks.
	InProcess() bool
}

// inProcess reports whether c.Store is an inProcessStore that says so.
func (c *Claimer) inProcess() bool {
	s, ok := c.Store.(inProcessStore)
	return ok && s.InProcess()
}

// DefaultStoreTimeout is the deadline of each store call that idem's
// edges (httpidem, idem proxy, grpcidem, connectidem) use when their
// StoreTimeout is zero: a store that does not answer within it is
// unavailable (HTTP 503, gRPC Unavailable), never a hang. Do has none of
// its own: the caller's context bounds it.
const DefaultStoreTimeout = 5 * time.Second

// DefaultFinishGrace is how long finishing (Complete, Release, Hold) may
// run past the caller's cancellation, or past its deadline, when
// Claimer.FinishGrace (Options.FinishGrace for Do) is zero.
const DefaultFinishGrace = 5 * time.Second

// AttemptObserver is told what a Claimer and its Attempts do, for
// metrics and tracing. observe.ForAttempts adapts an observe.Observer (a
// Prometheus or OpenTelemetry observer, a hook) to it; the root package
// imports no observation package, so it names what it reports itself.
type AttemptObserver interface {
	// StoreCall reports one store call after it returned, with the
	// context it was made with.
	StoreCall(ctx context.Context, m StoreMethod, d time.Duration, err error)
	// StartPhase is called as phase p of an attempt at key starts, with
	// the context the phase would run with; it returns the context the
	// phase runs with instead (its store calls, and for PhaseWork the
	// work, inherit it) and, when not nil, the func called once when the
	// phase ends.
	StartPhase(ctx context.Context, p AttemptPhase, key Key) (context.Context, func(PhaseReport))
}

// StoreMethod names the Store method of a store call an attempt makes.
// Its String is the op label of promidem's store latency histograms and
// otelidem's store-call metric (observe.StoreCall.Op).
type StoreMethod uint8

// Store methods an attempt calls.
const (
	MethodBegin       StoreMethod = iota // Store.Begin (each poll too, when waiting)
	MethodComplete                       // Store.Complete (Hold's too)
	MethodRelease                        // Store.Release
	MethodMarkStarted                    // Store.MarkStarted (at-most-once)
	numMethods
)

var methodNames = [numMethods]string{"begin", "complete", "release", "mark_started"}

func (m StoreMethod) String() string {
	if m >= numMethods {
		return "invalid"
	}
	return methodNames[m]
}

// AttemptPhase is a stretch of an attempt that an observer can time and
// trace (AttemptObserver.StartPhase, observe.PhaseObserver). A request
// refused or replayed by the store's decision has only PhaseDecide; an
// executed one has all three.
type AttemptPhase uint8

// Attempt phases, in the order they run.
const (
	// PhaseDecide asks the store for the key (Claimer.Begin): Store.Begin,
	// and its polls while the first request runs (httpidem's WaitTimeout,
	// Do's Wait).
	PhaseDecide AttemptPhase = iota + 1
	// PhaseWork runs the protected work (the handler, fn) as the key's
	// owner, from Attempt.Start to WorkDone; with at-most-once,
	// Store.MarkStarted first, in the phase.
	PhaseWork
	// PhaseComplete stores the work's result (Store.Complete) or gives
	// the claim up (Store.Release), and answers the caller: from
	// Attempt.Finishing to End.
	PhaseComplete
)

func (p AttemptPhase) String() string {
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

// PhaseReport is what a phase came to.
type PhaseReport struct {
	// Claim and Err are, for PhaseDecide, the store's answer; FailOpen is
	// Claimer.FailOpen.
	Claim    Claim
	FailOpen bool
	// Status is, for PhaseWork, what the work answered, in the adapter's
	// protocol (WorkDone's status).
	Status int
	// Err is why the phase failed: the store's error, a panic, an unknown
	// outcome's cause.
	Err error
}

// Ticket is what Claimer.Begin returns: the store's Claim, and when and
// for how long it was asked, which Attempt.Start needs to keep the lease.
type Ticket struct {
	Claim
	// Sent is when the Begin call that decided was sent, by this
	// process's clock: the store started the lease no earlier.
	Sent time.Time
	// Lease is the lease that was asked for (zero: DefaultLease).
	Lease time.Duration
}

// Begin asks the store for req.Key, in the decide phase: one Store.Begin,
// or, while another caller holds the key and Wait allows, one every poll.
// A claim still in flight when Wait runs out is returned as it is; when
// ctx ends while waiting, the error matches both ErrInFlight and ctx's
// cause. An Acquired ticket goes to Attempt.Start.
//
// req is passed to the store as it is: validate it first (Normalize) when
// it comes from a user.
func (c *Claimer) Begin(ctx context.Context, req BeginRequest) (Ticket, error) {
	dctx, end := c.phase(ctx, PhaseDecide, req.Key)
	claim, sent, err := c.begin(dctx, req)
	if end != nil {
		end(PhaseReport{Claim: claim, FailOpen: c.FailOpen, Err: err})
	}
	return Ticket{Claim: claim, Sent: sent, Lease: req.Lease}, err
}

func (c *Claimer) begin(ctx context.Context, req BeginRequest) (Claim, time.Time, error) {
	sent := time.Now()
	claim, err := c.beginOnce(ctx, req)
	c.storeCall(ctx, MethodBegin, sent, err)
	if err != nil || claim.Outcome != InFlight || c.Wait == 0 {
		return claim, sent, err
	}
	var deadline time.Time
	if c.Wait > 0 {
		deadline = sent.Add(c.Wait)
	}
	poll := c.PollInterval
	if poll <= 0 {
		poll = 25 * time.Millisecond
	}
	for {
		wait := min(poll, max(claim.RetryAfter, time.Millisecond))
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return claim, sent, nil // still in flight
			}
			wait = min(wait, left)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return Claim{}, sent, fmt.Errorf("%w; stopped waiting: %w", claim.Err(), context.Cause(ctx))
		case <-t.C:
		}
		sent = time.Now()
		next, err := c.beginOnce(ctx, req)
		c.storeCall(ctx, MethodBegin, sent, err)
		if err != nil && ctx.Err() != nil {
			// ctx ended as the timer fired (select picks either when both
			// are ready) or during the poll: the wait was stopped, and the
			// key was in flight when last seen, as above.
			return Claim{}, sent, fmt.Errorf("%w; stopped waiting: %w", claim.Err(), context.Cause(ctx))
		}
		if err != nil || next.Outcome != InFlight {
			return next, sent, err
		}
		claim = next
		poll = min(2*poll, time.Second)
	}
}

// beginOnce is one Store.Begin under StoreTimeout.
func (c *Claimer) beginOnce(ctx context.Context, req BeginRequest) (Claim, error) {
	if c.StoreTimeout <= 0 || c.inProcess() {
		return c.Store.Begin(ctx, req)
	}
	cctx, cancel := context.WithTimeout(ctx, c.StoreTimeout)
	defer cancel()
	claim, err := c.Store.Begin(cctx, req)
	return claim, c.timedOut(ctx, cctx, "begin", err)
}

// timedOut turns err, the error of a store call made on cctx (derived
// from ctx with the call's own deadline), into an unavailable error when
// it is cctx's deadline that ended the call while ctx was still live: the
// store did not answer in time; the caller did not give up.
func (c *Claimer) timedOut(ctx, cctx context.Context, op string, err error) error {
	if err == nil || ctx.Err() != nil || stopped(cctx) == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return &unavailableError{op: op, err: fmt.Errorf("no answer in time: %w", err)}
}

// phase starts p when there is an Observer; otherwise it returns ctx and
// a nil end.
func (c *Claimer) phase(ctx context.Context, p AttemptPhase, key Key) (context.Context, func(PhaseReport)) {
	if c.Observer == nil {
		return ctx, nil
	}
	return c.Observer.StartPhase(ctx, p, key)
}

// storeCall reports a store call that was sent at t0.
func (c *Claimer) storeCall(ctx context.Context, m StoreMethod, t0 time.Time, err error) {
	if c.Observer != nil {
		c.Observer.StoreCall(ctx, m, time.Since(t0), err)
	}
}

// Attempt is one run of a protected operation under a claim that
// Claimer.Begin acquired: it renews the lease from Start until the claim
// is finished (the work, then Complete, Release or Hold, however long the
// store takes to answer), and finishes the claim exactly as the rules of
// idem require:
//
//   - The work's context carries the Owner (FenceFromContext) and ends
//     with ErrLeaseLost as its cause when the lease is lost.
//   - Complete, Release and Hold run on a context the caller cannot
//     cancel: a caller that went away finds its result stored when it
//     retries. They are bounded all the same: by the caller's deadline or
//     Claimer.FinishGrace, whichever ends later, and each try by
//     Claimer.StoreTimeout. The heartbeat keeps renewing the lease while
//     they run, and stops when one has returned (except a Complete
//     refused as too large, which a marker's Complete follows), or at
//     End: a Complete slower than what was left of the lease does not
//     let another caller take the key over and run the work again.
//   - Complete makes the result durable before it returns: answer the
//     caller only after it returned nil.
//
// What the adapter decides: once the work has run (or may have: a panic
// after the first byte, an upstream that went silent), nothing may release
// the key; it completes it, with a not-replayable marker if the result
// cannot be stored, or holds it as outcome-unknown. Release is for work
// that did not happen or did not succeed.
//
// The zero Attempt is ready for Start; an Attempt must not be copied once
// started, and serves one claim only. Its methods are for the goroutine
// that runs the attempt, except that Complete may be called from the work
// while it runs (to store a marker before streaming, say).
type Attempt struct {
	c      *Claimer
	finish context.Context // detached from the caller's cancellation; the store calls run on it
	// deadline is the caller's deadline (zero: none); finishBy, once
	// finishing began, is when its store calls must have returned.
	deadline time.Time
	finishBy time.Time
	cancel   context.CancelCauseFunc
	hb       Heartbeat         // hb.owner is the claim's owner, from Start on
	work     func(PhaseReport) // the work phase's end, until WorkDone
	done     func(PhaseReport) // the complete phase's end, until End
	wctx     ownerContext      // the work's context, from Start on
}

// ownerContext is the work's context: the cancelable context it embeds,
// which also carries the owner (OwnerFromContext). It lives in its
// Attempt, so carrying the owner costs no allocation of its own.
type ownerContext struct {
	context.Context
	owner Owner
}

func (c *ownerContext) Value(key any) any {
	if key == (any)(ownerKey{}) {
		return c.owner
	}
	return c.Context.Value(key)
}

// ErrMarkFailed wraps the store's error when Start could not mark the
// claim started (Claimer.AtMostOnce): the work did not run and the claim
// was released.
var ErrMarkFailed = errors.New("idem: claim not marked started; the work did not run")

// Start starts the work phase of t (Acquired, from c.Begin): with
// c.AtMostOnce it marks the claim started, then it starts the heartbeat
// and returns the work's context, derived from ctx (the caller's).
//
// When Start returns an error the work must not run, and the context it
// returns is the complete phase's (see Finishing): answer the caller,
// report its decision with that context, then call End.
//
//   - With c.AtMostOnce and a claim taken over from a holder that had
//     started (t.Started), the work must not run again: the error matches
//     ErrOutcomeUnknown. Call Hold with the adapter's outcome-unknown
//     record.
//   - When the mark fails, Start has released the claim: the error
//     matches ErrMarkFailed and the store's error.
func (a *Attempt) Start(ctx context.Context, c *Claimer, t Ticket) (context.Context, error) {
	claim := t.Claim
	a.c, a.hb.owner = c, claim.Owner
	a.finish = finishContext(ctx)
	a.deadline, _ = ctx.Deadline()
	if c.AtMostOnce && claim.Started {
		// A previous holder started this work and lost its claim without a
		// result: it may have had its effects. Never again. The lease is
		// kept while Hold stores that; there is no work to cancel.
		a.hb.start(a.finish, func(error) {}, c.Store, a.hb.owner, t.Lease, t.Sent)
		return a.Finishing(ctx), fmt.Errorf("%w (key %v)", ErrOutcomeUnknown, claim.Owner.Key)
	}
	wctx, wend := c.phase(ctx, PhaseWork, claim.Owner.Key)
	a.work = wend
	if wend != nil {
		a.finish = finishContext(wctx) // the phase's store calls
	}
	hctx, cancel := context.WithCancelCause(wctx)
	a.cancel = cancel
	a.wctx = ownerContext{Context: hctx, owner: a.hb.owner}
	// The renewals run on the detached context: work that goes on after
	// its caller left keeps its claim, and so does a slow mark or
	// Complete (Claimer.StoreTimeout).
	a.hb.start(a.finish, cancel, c.Store, a.hb.owner, t.Lease, t.Sent)
	if c.AtMostOnce {
		t0 := time.Now()
		err := a.markStarted(hctx)
		c.storeCall(a.finish, MethodMarkStarted, t0, err)
		if err != nil {
			// Nothing ran: give the claim up so a retry can run it.
			if cause := context.Cause(hctx); errors.Is(cause, ErrLeaseLost) {
				err = errors.Join(err, cause)
			}
			err = fmt.Errorf("%w: %w", ErrMarkFailed, err)
			cancel(err)
			a.endWork(PhaseReport{Err: err})
			cctx := a.Finishing(ctx)
			if rerr := a.Release(); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
				err = errors.Join(err, rerr)
			}
			return cctx, err
		}
	}
	return &a.wctx, nil
}

// Owner returns the claim's owner (its fence, for the work's conditional
// writes).
func (a *Attempt) Owner() Owner { return a.hb.owner }

// WorkDone ends the work phase: it cancels the work's context, and
// reports the phase's end with status (what the work answered, in the
// adapter's protocol) and err (why it failed: a panic, an unknown
// outcome). The heartbeat goes on renewing the lease until Complete,
// Release or Hold has returned. It is safe to call more than once; only
// the first call reports.
func (a *Attempt) WorkDone(status int, err error) {
	if a.cancel != nil {
		a.cancel(context.Canceled)
	}
	a.endWork(PhaseReport{Status: status, Err: err})
}

func (a *Attempt) endWork(e PhaseReport) {
	if end := a.work; end != nil {
		a.work = nil
		end(e)
	}
}

// Run calls work, the protected code, and returns when it returned; the
// adapter then ends the work phase itself (WorkDone, Finishing, Complete,
// Release or Hold, End).
//
// When work does not return (it panicked, or called runtime.Goexit), Run
// finishes the attempt on the way out, before the panic goes on, in the
// order the engine requires: it ends the work phase with the status and
// error abandoned returns (WorkDone: what the work had answered so far, in
// the adapter's protocol, and the adapter's "panicked" error), starts the
// complete phase from ctx (Finishing), calls settle with that phase's
// context, then End. settle must finish the claim and may report the
// adapter's decision with the context it gets: Release when the work
// cannot have had effects, Hold (or Complete with a marker) when it may
// have.
func (a *Attempt) Run(ctx context.Context, work func(), abandoned func() (status int, err error), settle func(fctx context.Context)) {
	returned := false
	defer func() {
		if returned {
			return
		}
		status, err := abandoned()
		a.WorkDone(status, err)
		settle(a.Finishing(ctx))
		a.End()
	}()
	work()
	returned = true
}

// Lost reports whether the heartbeat gave the lease up: another caller may
// own the key now, and Complete will most likely fail with ErrLeaseLost.
func (a *Attempt) Lost() bool { return a.hb.Lost() }

// Finishing starts the complete phase and returns its context, derived
// from ctx (the caller's): report the caller's decision with it. The
// store calls of Complete, Release and Hold run on it, detached from the
// caller's cancellation. Without a Claimer.Observer it returns ctx. Calling
// it again returns ctx and changes nothing.
func (a *Attempt) Finishing(ctx context.Context) context.Context {
	if a.done != nil {
		return ctx
	}
	cctx, end := a.c.phase(ctx, PhaseComplete, a.hb.owner.Key)
	if end != nil {
		a.done = end
		a.finish = finishContext(cctx)
	}
	return cctx
}

// End ends the complete phase, once the caller was answered, and stops
// the heartbeat if no finishing call did (a Complete refused as too large
// and not followed by another). Call it on every path.
func (a *Attempt) End() {
	a.hb.stop()
	if a.cancel != nil {
		a.cancel(context.Canceled)
	}
	if end := a.done; end != nil {
		a.done = nil
		end(PhaseReport{})
	}
}

// Complete stores result as the key's result. A nil error means it is
// durable: the caller may be answered.
//
// When the store refuses result as too large (ErrResultTooLarge) and
// notReplayable is not nil, Complete stores notReplayable instead (the
// adapter's marker: "it ran, it cannot be replayed"; the work never runs
// again for the key) and returns an error matching ErrNotReplayable and
// ErrResultTooLarge: the marker is durable, the result is not. Any other
// error means nothing durable was stored: the caller must not be told of a
// success.
func (a *Attempt) Complete(result, notReplayable []byte) error {
	err := a.complete(result)
	if err == nil || notReplayable == nil || !errors.Is(err, ErrResultTooLarge) {
		return err
	}
	if cerr := a.complete(notReplayable); cerr != nil {
		return errors.Join(err, cerr)
	}
	return fmt.Errorf("%w: %w", ErrNotReplayable, err)
}

// Hold completes the key as held (Store.Hold) with record, the adapter's
// outcome-unknown result: the work may have run and its result is
// unknown, so it never runs again for the key; every retry gets record
// until an operator resolves it.
func (a *Attempt) Hold(record []byte) error {
	return a.finishing("hold", MethodComplete, func(ctx context.Context) error { return a.c.Store.Hold(ctx, a.hb.owner, record) })
}

// Release gives the claim up without a result, so that a retry runs the
// work: for work that did not happen, or failed before it had effects.
// ErrLeaseLost means another caller holds the key now.
func (a *Attempt) Release() error {
	return a.finishing("release", MethodRelease, func(ctx context.Context) error { return a.c.Store.Release(ctx, a.hb.owner) })
}

func (a *Attempt) complete(data []byte) error {
	return a.finishing("complete", MethodComplete, func(ctx context.Context) error { return a.c.Store.Complete(ctx, a.hb.owner, data) })
}

// finishing makes call, a finishing store call (Complete, Release, Hold),
// while the heartbeat keeps the lease: a call slower than what is left of
// the lease keeps the claim (issue 34: with the renewals stopped first, a
// slow Complete let another caller take the key over and run the work
// again). The heartbeat stops once the call has returned, unless the
// store refused the result as too large: the adapter's marker follows.
//
// A renewal that races a Complete which succeeded finds the record no
// longer in flight; during the call, a lost lease therefore does not
// cancel the work (Complete may be called from the work, which goes on
// streaming). The call's own answer tells: ErrLeaseLost cancels the work.
func (a *Attempt) finishing(op string, m StoreMethod, call func(context.Context) error) error {
	a.hb.startFinishing()
	t0 := time.Now()
	err := a.finishCall(op, call)
	a.c.storeCall(a.finish, m, t0, err)
	if !errors.Is(err, ErrResultTooLarge) {
		a.hb.stop()
	}
	if a.cancel != nil && errors.Is(err, ErrLeaseLost) {
		a.cancel(ErrLeaseLost)
	}
	return err
}

func (a *Attempt) markStarted(ctx context.Context) error {
	if a.c.StoreTimeout <= 0 || a.c.inProcess() {
		return a.c.Store.MarkStarted(ctx, a.hb.owner)
	}
	cctx, cancel := context.WithTimeout(ctx, a.c.StoreTimeout)
	defer cancel()
	return a.c.timedOut(ctx, cctx, "mark started", a.c.Store.MarkStarted(cctx, a.hb.owner))
}

// finishCall runs call, a finishing store call, within the finishing
// bound (see Claimer.FinishGrace), which the attempt's first finishing
// call fixes; each try is also bounded by StoreTimeout. A try that
// certainly never reached the server is made again, with a short backoff,
// while the bound allows. An in-process store's call is made once, on the
// detached context: it returns at once, and never fails unsent.
func (a *Attempt) finishCall(op string, call func(context.Context) error) error {
	if a.c.inProcess() {
		return call(a.finish)
	}
	if a.finishBy.IsZero() {
		grace := a.c.FinishGrace
		if grace <= 0 {
			grace = DefaultFinishGrace
		}
		a.finishBy = time.Now().Add(grace)
		if a.deadline.After(a.finishBy) {
			a.finishBy = a.deadline
		}
	}
	bctx, cancel := context.WithDeadline(a.finish, a.finishBy)
	defer cancel()
	backoff := 20 * time.Millisecond
	for {
		cctx, ccancel := bctx, context.CancelFunc(func() {})
		if a.c.StoreTimeout > 0 {
			cctx, ccancel = context.WithTimeout(bctx, a.c.StoreTimeout)
		}
		err := call(cctx)
		if err != nil && stopped(cctx) != nil && !errors.Is(err, ErrUnavailable) {
			// The finishing bound (or the call's own deadline) ran out:
			// the store did not answer in time.
			err = &unavailableError{op: op, err: fmt.Errorf("no answer within the finishing bound: %w", err)}
		}
		ccancel()
		if err == nil || !neverSent(err) || time.Until(a.finishBy) < backoff {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-bctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// neverSent reports whether err certainly means the call never reached
// the server, so that sending it again cannot apply it twice: the
// connection was refused or the network unreachable, or the driver says
// so (pgconn's SafeToRetry).
func neverSent(err error) bool {
	var safe interface{ SafeToRetry() bool }
	if errors.As(err, &safe) && safe.SafeToRetry() {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.EHOSTUNREACH)
}

// finishContext is the context Complete, Release and Hold and the
// heartbeat's renewals run on, derived from ctx. It is detached from ctx's
// cancellation (and so from its deadline), so that a caller that went away
// finds its result stored when it retries; each call on it is bounded
// instead, the renewals by the lease (Heartbeat), the finishing calls by
// finishCall: the one place that decides how long finishing may take.
func finishContext(ctx context.Context) context.Context { return context.WithoutCancel(ctx) }
