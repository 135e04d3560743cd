package step

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
)

// failedPrefix begins the result Do stores for an operation that failed
// for good, followed by the JSON of its FailedError. Like idem's own
// markers it begins with a NUL byte, which no JSON text does.
const failedPrefix = "\x00idem/1 steps-failed "

// Do runs fn, a keyed operation of steps, at most once per key as
// idem.Do does (the same store, key, lease, fence and replay), and lets
// it resume where it stopped: fn runs its steps with Run, and a retry of
// the key after a crash, a lost lease or an error skips the steps that
// finished, hands their stored results on, and runs from the first
// unfinished one. fn's result is stored as the key's result (its JSON,
// as idem.Do stores it) and replayed to every later call.
//
// How the claim ends:
//
//   - fn returns a value: the key is completed with it.
//   - fn returns an error (or panics): the claim is released; the steps
//     that finished stay, so the next call resumes after them.
//   - fn returns a Permanent error (from a step or between steps): the
//     compensations of the finished steps run in reverse order, each
//     once, and the key is completed with a *FailedError, which every
//     later call gets. A compensation that fails releases the claim: the
//     next call runs the remaining ones.
//   - a HoldUnknown step started in an earlier run and never finished:
//     the key is held as outcome-unknown, with a result that names the
//     step and the steps that finished before it
//     (idem.OutcomeUnknownStepResult: 'idem keys', the operations page
//     and the resolver show them), and Do returns an *UnknownError
//     naming the step, as every later call does (idem.ErrOutcomeUnknown)
//     until an operator resolves the key.
//
// opts is idem.Do's; AtMostOnce is refused (a step's HoldUnknown policy
// says it per step).
func Do[T any](ctx context.Context, s Store, key idem.Key, opts *idem.Options, fn func(ctx context.Context, op *Op) (T, error)) (T, error) {
	return do(ctx, s, key, opts, fn, 0)
}

// do is Do; with limit > 0 (a Completer's attempt) the attempt is
// counted as a recovery point first, and when the operation has had limit
// of them, it is held as outcome-unknown instead of run.
func do[T any](ctx context.Context, s Store, key idem.Key, opts *idem.Options, fn func(ctx context.Context, op *Op) (T, error), limit int) (T, error) {
	var zero T
	if opts == nil {
		opts = &idem.Options{}
	}
	if opts.AtMostOnce {
		return zero, &idem.ConfigError{Package: "step", Field: "Options.AtMostOnce", Reason: "not for an operation of steps: give its foreign steps the HoldUnknown policy"}
	}
	req, err := idem.BeginRequest{Key: key, Fingerprint: opts.Fingerprint, Lease: opts.Lease, Retention: opts.Retention}.Normalize()
	if err != nil {
		return zero, err
	}
	c := &idem.Claimer{Store: s, PollInterval: opts.PollInterval, FinishGrace: opts.FinishGrace}
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
	if t.Outcome == idem.Replay {
		return replay[T](key, t.Result)
	}
	var a idem.Attempt
	defer a.End()
	wctx, err := a.Start(ctx, c, t)
	if err != nil {
		return zero, err
	}
	op, err := Load(wctx, s)
	if err != nil {
		a.WorkDone(0, err)
		_ = a.Release()
		return zero, err
	}
	op.started, op.startedKnown = t.Started, true
	var v T
	// fn panicked (Attempt.Run finishes the claim on the way out): its
	// finished steps are saved. Inside a HoldUnknown step it may have had
	// its effect: hold; otherwise the next call resumes.
	a.Run(ctx, func() { v, err = run(wctx, op, fn, limit) }, func() (int, error) { return 0, errPanicked }, func(context.Context) {
		if op.holding != "" {
			_ = a.Hold(op.heldResult(op.holding))
		} else {
			_ = a.Release()
		}
	})
	a.WorkDone(0, err)
	var failed *FailedError
	switch {
	case err == nil:
		data, merr := json.Marshal(v)
		if merr != nil {
			err = fmt.Errorf("%w: step: encode the result of key %v: %w", idem.ErrNotReplayable, key, merr)
			if cerr := a.Complete(idem.NotReplayableResult(), nil); cerr != nil {
				err = errors.Join(err, cerr)
			}
			return zero, err
		}
		if err := a.Complete(data, idem.NotReplayableResult()); err != nil {
			return zero, err
		}
		return v, nil
	case errors.Is(err, idem.ErrOutcomeUnknown):
		held := idem.OutcomeUnknownResult() // a Completer that gave up: no step
		if u := (*UnknownError)(nil); errors.As(err, &u) {
			held = idem.OutcomeUnknownStepResult(u.HeldStep())
		}
		if herr := a.Hold(held); herr != nil {
			return zero, errors.Join(err, herr)
		}
		return zero, err
	case errors.As(err, &failed):
		data, _ := json.Marshal(failed)
		if cerr := a.Complete(append([]byte(failedPrefix), data...), nil); cerr != nil {
			return zero, errors.Join(err, cerr)
		}
		return zero, failed
	}
	if rerr := a.Release(); rerr != nil && !errors.Is(rerr, idem.ErrLeaseLost) {
		return zero, errors.Join(err, rerr)
	}
	return zero, err
}

var errPanicked = errors.New("step: the operation panicked")

// run runs fn; a failure for good is
// recorded and compensated, and comes back as a *FailedError.
func run[T any](ctx context.Context, op *Op, fn func(ctx context.Context, op *Op) (T, error), limit int) (T, error) {
	var zero T
	if limit > 0 {
		if err := op.attempt(ctx, limit); err != nil {
			return zero, err
		}
	}
	v, err := fn(ctx, op)
	if err == nil {
		return v, nil
	}
	var failed *FailedError
	if !IsPermanent(err) && !errors.As(err, &failed) {
		return zero, err
	}
	if ferr := op.fail(ctx, "", err); ferr != nil {
		return zero, errors.Join(err, ferr)
	}
	if cerr := op.compensate(ctx); cerr != nil {
		return zero, cerr // released: the next call compensates the rest
	}
	return zero, op.failure()
}

// replay decodes a stored result of Do.
func replay[T any](key idem.Key, data []byte) (T, error) {
	var zero T
	switch {
	case bytes.Equal(data, idem.OutcomeUnknownResult()):
		return zero, fmt.Errorf("%w (key %v)", idem.ErrOutcomeUnknown, key)
	case idem.IsOutcomeUnknownResult(data): // held in a step: name it
		if h, ok := idem.HeldStepOf(data); ok {
			return zero, &UnknownError{Key: key, Step: h.Name, Finished: h.Finished}
		}
		return zero, fmt.Errorf("%w (key %v)", idem.ErrOutcomeUnknown, key)
	case bytes.Equal(data, idem.NotReplayableResult()):
		return zero, fmt.Errorf("%w (key %v)", idem.ErrNotReplayable, key)
	case bytes.HasPrefix(data, []byte(failedPrefix)):
		f := new(FailedError)
		if err := json.Unmarshal(data[len(failedPrefix):], f); err != nil {
			return zero, fmt.Errorf("step: decode the stored failure of key %v: %w", key, err)
		}
		return zero, f
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return zero, fmt.Errorf("step: decode the stored result of key %v: %w", key, err)
	}
	return v, nil
}
