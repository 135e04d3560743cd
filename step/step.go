package step

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemkit/idem"
)

// Names of the recovery points Run and Do keep besides the steps' own
// results. User step names must not begin with '!'.
const (
	startPrefix = "!start/" // a HoldUnknown step is about to run
	undoPrefix  = "!undo/"  // a step's compensation ran
	failedName  = "!failed" // the operation failed for good (a FailedError)
)

// Policy says what a retry does with a step that started and never
// finished (its process died while it ran, or before its recovery point
// was stored): the step's outcome is unknown.
type Policy uint8

const (
	// RetryUnknown runs the step again: right for a local step (its
	// writes commit with its recovery point, or not at all) and for a
	// foreign call that sends the step's derived key (Step.Key), which
	// the other service deduplicates.
	RetryUnknown Policy = iota
	// HoldUnknown never runs the step twice: before it runs, Run stores
	// a start mark and marks the claim started (Store.MarkStarted: two
	// more store writes); a retry that took the claim over from a holder
	// that died after that point, and finds the mark without the step's
	// result, holds the key as outcome-unknown (Do) or returns an
	// *UnknownError naming the step. A release clears the claim's mark:
	// after a step that returned an error (which says it had no effect),
	// or an operator's resolution that released the held key, the step
	// runs again. A panic inside the step holds the key at once. For a
	// foreign call to a service that cannot deduplicate (no idempotency
	// key).
	HoldUnknown
)

// Options tunes one step. A nil *Options means the defaults.
type Options struct {
	// Unknown is the step's unknown-outcome policy (default RetryUnknown).
	Unknown Policy
	// Compensate undoes the step when a later step fails for good
	// (Permanent): it gets the step's stored result. The compensations of
	// the finished steps run in reverse order, each once: a compensation
	// that returned nil is recorded as a recovery point of its own and is
	// skipped when the failure is replayed. It runs under the claim, like
	// a step; key is the compensation's derived key, for a foreign call.
	Compensate func(ctx context.Context, key string, result []byte) error
}

// Op is one run of a keyed operation of steps, under the claim its
// context carries. Do makes one and passes it to the operation; Load
// makes one from the context of a handler that runs under a claim
// (httpidem's middleware, Do). An Op is for one goroutine.
type Op struct {
	store Store
	owner idem.Owner
	// done holds the recovery points as loaded, and those saved since.
	done map[string][]byte
	// seen: the step names Run was called with in this run.
	seen map[string]bool
	// finished: the steps with a compensation that finished (in this run
	// or an earlier one), in the order Run reached them.
	finished []finishedStep
	// reached: the steps Run returned a result for in this run, in order
	// (the finished steps before a held one: UnknownError.Finished).
	reached []string
	// started is the claim's Claim.Started (a holder marked it and no
	// release came since), when startedKnown; holding: the HoldUnknown
	// step that is running ("": none).
	started, startedKnown bool
	holding               string
}

type finishedStep struct {
	name       string
	result     []byte
	compensate func(ctx context.Context, key string, result []byte) error
}

// Load returns the Op of the claim that ctx runs under (the context Do,
// httpidem's handler or the RPC interceptors give the work), with the
// recovery points of its operation loaded from s: one store round trip.
// s must be the store that claimed the key.
func Load(ctx context.Context, s Store) (*Op, error) {
	owner, ok := idem.OwnerFromContext(ctx)
	if !ok || owner.Key.IsZero() {
		return nil, &idem.ConfigError{Package: "step", Field: "ctx", Reason: "runs under no claim (use the context of Do, of a protected handler or of an Attempt)"}
	}
	done, err := s.Steps(ctx, owner)
	if err != nil {
		return nil, fmt.Errorf("step: load the recovery points of key %v: %w", owner.Key, err)
	}
	if done == nil {
		done = make(map[string][]byte)
	}
	return &Op{store: s, owner: owner, done: done, seen: make(map[string]bool)}, nil
}

// Owner returns the claim the operation runs under: its Fence is for the
// steps' own conditional writes.
func (op *Op) Owner() idem.Owner { return op.owner }

// Done reports whether the step name finished in this run or an earlier
// one of the operation.
func (op *Op) Done(name string) bool {
	_, ok := op.done[name]
	return ok
}

func (op *Op) save(ctx context.Context, name string, result []byte) error {
	if err := op.store.SaveStep(ctx, op.owner, name, result); err != nil {
		return fmt.Errorf("step: save %q of key %v: %w", name, op.owner.Key, lostCause(ctx, err))
	}
	op.done[name] = result
	return nil
}

// lostCause adds ErrLeaseLost to err, a store call's error on ctx, when
// the heartbeat gave the claim up (ctx's cause) and err does not say so.
func lostCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, idem.ErrLeaseLost) && !errors.Is(err, idem.ErrLeaseLost) {
		return errors.Join(err, cause)
	}
	return err
}

// Step is a running step, as Run hands it to the step's function.
type Step struct {
	op    *Op
	name  string
	saved []byte // set by SaveWith
}

// Name returns the step's name.
func (s *Step) Name() string { return s.name }

// Owner returns the claim the step runs under.
func (s *Step) Owner() idem.Owner { return s.op.owner }

// Key returns the step's derived key, to send to another service as its
// idempotency key (an Idempotency-Key header, a provider's request id).
// See DerivedKey.
func (s *Step) Key() string { return DerivedKey(s.op.owner.Key, s.name) }

// SaveFunc stores a step's recovery point: a store's SaveStepTx bound to
// the caller's transaction (sqlstore.Store.StepTx), for a local step.
type SaveFunc func(ctx context.Context, owner idem.Owner, name string, result []byte) error

// SaveWith stores v, the step's result, as its recovery point through
// save, inside the transaction of the step's own writes: a local step.
// The step's writes and its recovery point then commit together or not
// at all, so the step is exactly once. Commit that transaction after
// SaveWith returned nil, and return v; Run then stores nothing more.
// SaveWith returns idem.ErrLeaseLost (roll back) when the claim was lost.
func (s *Step) SaveWith(ctx context.Context, v any, save SaveFunc) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("step: encode the result of %q: %w", s.name, err)
	}
	if err := save(ctx, s.op.owner, s.name, data); err != nil {
		return err
	}
	s.saved = data
	return nil
}

// DerivedKey is the key of step name of the operation of key: the same
// for every run of the operation (stable across retries, takeovers and
// processes), different for every step and for every key. It is 43
// visible ASCII characters ("s1-" and 40 hex digits of a SHA-256 of the
// key's digest and the name), valid as an Idempotency-Key, and reveals
// neither the key nor the name.
//
// It makes a foreign step once only where the other service
// deduplicates by it (idem's client through idem proxy, a provider's
// idempotency key) and keeps its records longer than the operation may
// be retried. It names the step, not the attempt: two operations that
// reuse a key after the first one's record expired derive the same keys.
func DerivedKey(key idem.Key, name string) string {
	d := key.Digest()
	h := sha256.New()
	h.Write([]byte("idem step key\x00"))
	h.Write(d[:])
	h.Write([]byte(name))
	return "s1-" + hex.EncodeToString(h.Sum(nil)[:20])
}

// Run runs fn as the step name of op, once per operation: when the step
// finished in an earlier run (before a crash, a lost lease, a release)
// it returns the stored result without calling fn; otherwise it calls fn
// and stores its result (the JSON encoding of T) as the step's recovery
// point before it returns it. A step's name must be unique within the
// operation, and not begin with '!'.
//
// When fn returns an error the step did not finish: nothing is stored,
// and a retry of the operation runs it again (an error wrapped with
// Permanent fails the operation for good instead: see Do). When storing
// the recovery point fails, the step's effects happened but are not
// recorded: a retry runs it again, unless it is local (SaveWith) or its
// other service deduplicates its derived key; with HoldUnknown it is held
// instead.
func Run[T any](ctx context.Context, op *Op, name string, opts *Options, fn func(ctx context.Context, s *Step) (T, error)) (T, error) {
	var zero T
	if opts == nil {
		opts = &Options{}
	}
	if err := CheckName(name); err != nil {
		return zero, err
	}
	if strings.HasPrefix(name, "!") {
		return zero, &idem.ConfigError{Package: "step", Field: "name", Reason: fmt.Sprintf("%q: names beginning with '!' are reserved", name)}
	}
	if op.seen[name] {
		return zero, &idem.ConfigError{Package: "step", Field: "name", Reason: fmt.Sprintf("%q: two steps of one operation have this name", name)}
	}
	op.seen[name] = true
	if data, ok := op.done[name]; ok {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return zero, fmt.Errorf("step: decode the stored result of %q of key %v: %w", name, op.owner.Key, err)
		}
		op.finish(name, data, opts)
		op.reached = append(op.reached, name)
		return v, nil
	}
	if f := op.failure(); f != nil {
		return zero, f // failed for good in an earlier run: no step runs again
	}
	if opts.Unknown == HoldUnknown {
		if err := op.startUnknown(ctx, name); err != nil {
			return zero, err
		}
		op.holding = name
	}
	s := &Step{op: op, name: name}
	v, err := fn(ctx, s)
	op.holding = ""
	if err != nil {
		if IsPermanent(err) {
			if ferr := op.fail(ctx, name, err); ferr != nil {
				return zero, errors.Join(err, ferr)
			}
		}
		return zero, err
	}
	data := s.saved
	if data == nil {
		if data, err = json.Marshal(v); err != nil {
			return zero, fmt.Errorf("step: encode the result of %q: %w", name, err)
		}
		if err := op.save(ctx, name, data); err != nil {
			return zero, err
		}
	}
	op.done[name] = data
	op.finish(name, data, opts)
	op.reached = append(op.reached, name)
	return v, nil
}

// startUnknown is the start of a HoldUnknown step: its start mark (once
// per operation) and the record's started mark (Store.MarkStarted), or an
// *UnknownError when an earlier run started it and never finished. A
// start mark alone is not enough: a release since (the step returned an
// error, which says it had no effect; an operator resolved the held key
// by releasing it) clears the record's mark, and the step runs again. A
// takeover keeps it: the holder died, the outcome is unknown.
func (op *Op) startUnknown(ctx context.Context, name string) error {
	if _, marked := op.done[startPrefix+name]; marked {
		started := op.started
		if !op.startedKnown { // Load: read the record once
			rec, err := op.store.Get(ctx, op.owner.Key)
			if err != nil {
				return fmt.Errorf("step: read the record of key %v: %w", op.owner.Key, err)
			}
			started, op.started, op.startedKnown = rec.Started, rec.Started, true
		}
		if started {
			return &UnknownError{Key: op.owner.Key, Step: name, Finished: op.finishedBefore()}
		}
	} else if err := op.save(ctx, startPrefix+name, nil); err != nil {
		return err
	}
	if err := op.store.MarkStarted(ctx, op.owner); err != nil {
		return fmt.Errorf("step: mark %q of key %v started: %w", name, op.owner.Key, lostCause(ctx, err))
	}
	return nil
}

// finishedBefore returns the steps Run reached and finished in this run,
// the last idem.MaxHeldFinished: those before the step it is in.
func (op *Op) finishedBefore() []string {
	return slices.Clone(op.reached[max(len(op.reached)-idem.MaxHeldFinished, 0):])
}

// heldResult is the result a key held in step name is held with: Do's
// outcome-unknown result naming the step (idem.OutcomeUnknownStepResult).
func (op *Op) heldResult(name string) []byte {
	return idem.OutcomeUnknownStepResult(idem.HeldStep{Name: name, Finished: op.finishedBefore()})
}

func (op *Op) finish(name string, data []byte, opts *Options) {
	if opts.Compensate != nil {
		op.finished = append(op.finished, finishedStep{name: name, result: data, compensate: opts.Compensate})
	}
}

// failure returns the operation's recorded permanent failure, if any.
func (op *Op) failure() *FailedError {
	data, ok := op.done[failedName]
	if !ok {
		return nil
	}
	f := new(FailedError)
	if err := json.Unmarshal(data, f); err != nil {
		f.Msg = "(unreadable failure record)"
	}
	return f
}

// fail records that the operation failed for good at step (empty: outside
// a step), unless a failure is recorded already.
func (op *Op) fail(ctx context.Context, step string, err error) error {
	if op.failure() != nil {
		return nil
	}
	data, _ := json.Marshal(FailedError{Step: step, Msg: err.Error()})
	return op.save(ctx, failedName, data)
}

// compensate runs the compensations of the finished steps in reverse
// order, skipping those that ran before, and records each.
func (op *Op) compensate(ctx context.Context) error {
	for i := len(op.finished) - 1; i >= 0; i-- {
		f := op.finished[i]
		undo := undoPrefix + f.name
		if _, ok := op.done[undo]; ok {
			continue
		}
		if err := f.compensate(ctx, DerivedKey(op.owner.Key, undo), f.result); err != nil {
			return fmt.Errorf("step: compensate %q of key %v: %w", f.name, op.owner.Key, err)
		}
		if err := op.save(ctx, undo, nil); err != nil {
			return err
		}
	}
	return nil
}

// Permanent marks err as a failure for good: the operation must not be
// retried. Returned by a step (or by the operation between steps), it
// makes Do run the compensations of the finished steps and complete the
// key with a *FailedError, which every retry gets.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// ErrFailed is matched by a *FailedError.
var ErrFailed = errors.New("step: the operation failed for good")

// FailedError is the answer of an operation that failed for good: Step
// (empty: between steps) returned a Permanent error whose text is Msg.
// The compensations of the steps before it ran.
type FailedError struct {
	Step string `json:"step"`
	Msg  string `json:"error"`
}

func (e *FailedError) Error() string {
	if e.Step == "" {
		return "step: the operation failed for good: " + e.Msg
	}
	return fmt.Sprintf("step: the operation failed for good at step %q: %s", e.Step, e.Msg)
}

// Is makes a FailedError match ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// UnknownError is returned for a HoldUnknown step that started in an
// earlier run and never finished: it may have had its effects. It
// matches idem.ErrOutcomeUnknown. Do holds the key, naming the step
// (idem.HeldStep); a handler behind httpidem's middleware calls
// httpidem.OutcomeUnknown with it, which names the step in the held
// record too.
type UnknownError struct {
	Key  idem.Key
	Step string
	// Finished are the steps that finished before Step, in the order the
	// operation reached them (the last idem.MaxHeldFinished); nil when
	// the error comes from a replay of a record held by an earlier
	// release, which did not store them.
	Finished []string
}

// HeldStep returns the step the key is held in, as the held record
// stores it: the method httpidem looks for in OutcomeUnknown's cause.
func (e *UnknownError) HeldStep() idem.HeldStep {
	return idem.HeldStep{Name: e.Step, Finished: e.Finished}
}

func (e *UnknownError) Error() string {
	return fmt.Sprintf("step: the outcome of step %q of key %v is unknown (it started and did not finish)", e.Step, e.Key)
}

// Is makes an UnknownError match idem.ErrOutcomeUnknown.
func (e *UnknownError) Is(target error) bool { return target == idem.ErrOutcomeUnknown }
