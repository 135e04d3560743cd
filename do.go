package idem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Options tunes Do. A nil *Options means the defaults.
type Options struct {
	// Fingerprint identifies the request's content; a later call with the
	// same key and another fingerprint gets ErrMismatch. Zero means none.
	Fingerprint Fingerprint
	// Lease and Retention are passed to Store.Begin (zero: the defaults).
	Lease     time.Duration
	Retention time.Duration
	// Wait makes a call that finds the key in flight wait for the first
	// call's result (polling the store) until its context ends, instead of
	// returning ErrInFlight at once.
	Wait bool
	// PollInterval is the first wait between polls in Wait mode; it doubles
	// up to one second. Zero means 25ms.
	PollInterval time.Duration
	// AtMostOnce is for work with effects outside the store that must
	// never happen twice, even after a crash (a payment sent to a provider
	// that cannot deduplicate). Do records that fn is starting
	// (Store.MarkStarted, one extra round trip) before it calls fn. A
	// caller that takes the claim over from a holder that died after that
	// point does not run fn: it completes the key as outcome-unknown and
	// returns ErrOutcomeUnknown, and so does every later call with the
	// key, until an operator resolves it: the record is held
	// (StateHeld), and idem.Resolve (or 'idem keys resolve') stores the
	// real result, the JSON of fn's value, or releases the key so that the
	// next call runs fn. A panic in fn also leaves the key outcome-unknown:
	// fn may have acted. An error returned by fn still releases the claim,
	// so return one only when fn's effects did not happen.
	//
	// The trade-off: a key may be held as outcome-unknown when the holder
	// died before acting, instead of being run twice when it died after.
	//
	// The mark, like every record, survives a failover of a replicated
	// store only when the replication is synchronous: a replica that
	// missed it lets the key run again (docs/replication.md).
	AtMostOnce bool
	// FinishGrace bounds how long Do may spend storing fn's result (or
	// releasing the claim) once fn returned: until ctx's deadline, or
	// FinishGrace after fn returned, whichever is later. Storing ignores
	// ctx's cancellation, so that a caller that gave up still finds the
	// result when it retries; a store that does not answer within the
	// bound makes Do return an error matching ErrUnavailable (the key then
	// stays claimed until its lease runs out). Zero means
	// DefaultFinishGrace.
	FinishGrace time.Duration
}

// Stored results of Do are the JSON encoding of fn's result. The two
// terminal markers below begin with a NUL byte, which no JSON text does,
// so they can never be mistaken for a result.
var (
	markerNotReplayable  = []byte("\x00idem/1 not-replayable")
	markerOutcomeUnknown = []byte(heldExact)
)

// OutcomeUnknownResult and NotReplayableResult are the results Do stores
// for a key whose outcome is unknown (see Options.AtMostOnce) or whose
// result could not be stored (ErrNotReplayable). Tools that resolve or
// list keys compare stored results with them; a Do call that replays one
// returns ErrOutcomeUnknown or ErrNotReplayable.
func OutcomeUnknownResult() []byte { return bytes.Clone(markerOutcomeUnknown) }

// NotReplayableResult: see OutcomeUnknownResult.
func NotReplayableResult() []byte { return bytes.Clone(markerNotReplayable) }

// Do runs fn for key in one caller at a time, however many times and from
// however many goroutines or processes it is called, and answers every
// call after fn succeeded with that first successful result. That is at
// most one live run, not exactly-once: after a crash fn can run again
// (below).
//
//   - The first call claims the key, runs fn with a context that carries the
//     claim's Owner (see FenceFromContext) and keeps the lease renewed, stores
//     the JSON encoding of fn's result, then returns it.
//   - A later call returns the stored result, decoded, without running fn.
//   - A call while the first is still running gets an *InFlightError
//     (errors.Is ErrInFlight), or waits for the result with Options.Wait.
//   - A call with another fingerprint gets ErrMismatch.
//
// When fn returns an error, the claim is released and the error is returned:
// nothing is stored, so a retry runs fn again. When fn panics, the panic goes
// on and the claim is released as well, except with Options.AtMostOnce: fn
// may have acted before it panicked, so the key is held as outcome-unknown.
// When fn's result cannot be encoded, fn has run: the key is completed
// with the "not replayable" marker, as for a result too large (below).
// When the store cannot record the result, Do returns the store's error and
// not the result: every result a caller sees is one that a retry will see too.
// When the result is larger than the store accepts (ErrResultTooLarge), fn
// has run and its result cannot be replayed: Do completes the key with a
// "not replayable" marker and returns an error matching both
// ErrNotReplayable and ErrResultTooLarge; every later call gets
// ErrNotReplayable, and fn never runs again for the key.
//
// Do protects against duplicates, not against a crash between fn's effects
// and the record: after a crash the lease expires and a retry runs fn again.
// Make fn's own writes conditional on the fence, or complete inside the same
// transaction (sqlstore.CompleteTx), to close that window; or, for effects
// that cannot be made conditional, set Options.AtMostOnce.
func Do[T any](ctx context.Context, s Store, key Key, opts *Options, fn func(ctx context.Context) (T, error)) (T, error) {
	r, err := DoResult(ctx, s, key, opts, fn)
	return r.Value, err
}

// Result is what DoResult returns: the value, and how this call got it.
type Result[T any] struct {
	Value T
	// Replayed is true when Value is the stored result of an earlier run:
	// fn did not run in this call.
	Replayed bool
	// Fence is the fencing token fn ran under, when it ran in this call
	// (zero for a replay).
	Fence Fence
}

// DoResult is Do that also tells the caller whether the value was replayed
// or produced now, without a second lookup: for audit logs, metrics, or an
// API that marks replays (as HTTP's Idempotent-Replayed header does).
func DoResult[T any](ctx context.Context, s Store, key Key, opts *Options, fn func(ctx context.Context) (T, error)) (Result[T], error) {
	var zero Result[T]
	if opts == nil {
		opts = &Options{}
	}
	req := BeginRequest{Key: key, Fingerprint: opts.Fingerprint, Lease: opts.Lease, Retention: opts.Retention}
	req, err := req.Normalize()
	if err != nil {
		return zero, err
	}
	c := &Claimer{Store: s, AtMostOnce: opts.AtMostOnce, PollInterval: opts.PollInterval, FinishGrace: opts.FinishGrace}
	if opts.Wait {
		c.Wait = -1 // until ctx ends
	}
	t, err := c.Begin(ctx, req)
	if err == nil {
		err = t.Err()
	}
	if err != nil {
		return zero, err
	}
	if t.Outcome == Replay {
		switch {
		case IsOutcomeUnknownResult(t.Result):
			return zero, fmt.Errorf("%w (key %v)", ErrOutcomeUnknown, key)
		case bytes.Equal(t.Result, markerNotReplayable):
			return zero, fmt.Errorf("%w (key %v)", ErrNotReplayable, key)
		}
		var v T
		if err := json.Unmarshal(t.Result, &v); err != nil {
			return zero, fmt.Errorf("idem: decode stored result of key %v: %w", key, err)
		}
		return Result[T]{Value: v, Replayed: true}, nil
	}

	var a Attempt
	defer a.End() // the finishing calls below stop the heartbeat; this is for any path that would not
	wctx, err := a.Start(ctx, c, t)
	if errors.Is(err, ErrOutcomeUnknown) {
		// A holder that lost its claim had started fn: it may have
		// acted. Never run it again; make the unknown outcome the key's
		// result, so every retry gets the same answer.
		if herr := a.Hold(markerOutcomeUnknown); herr != nil {
			return zero, herr
		}
		return zero, err
	}
	if err != nil { // fn has not run; Start gave the claim back
		return zero, err
	}
	var v T
	a.Run(ctx, func() { v, err = fn(wctx) }, func() (int, error) { return 0, errPanicked }, func(context.Context) {
		if opts.AtMostOnce {
			_ = a.Hold(markerOutcomeUnknown) // fn may have acted before it panicked
		} else {
			_ = a.Release()
		}
	})
	a.WorkDone(0, err)
	if err != nil {
		if rerr := a.Release(); rerr != nil && !errors.Is(rerr, ErrLeaseLost) {
			return zero, errors.Join(err, rerr)
		}
		return zero, err
	}
	data, err := json.Marshal(v)
	if err != nil {
		// fn ran: a retry must not run it again. The key ends not
		// replayable.
		err = fmt.Errorf("%w: idem: encode result of key %v: %w", ErrNotReplayable, key, err)
		if cerr := a.Complete(markerNotReplayable, nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return zero, err
	}
	if err := a.Complete(data, markerNotReplayable); err != nil {
		if errors.Is(err, ErrResultTooLarge) && !errors.Is(err, ErrNotReplayable) {
			// The marker failed too: fn ran, its result is lost.
			err = fmt.Errorf("%w: %w", ErrNotReplayable, err)
		}
		return zero, err
	}
	return Result[T]{Value: v, Fence: a.Owner().Fence}, nil
}

var errPanicked = errors.New("idem: fn panicked")
