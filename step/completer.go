package step

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// attemptPrefix names the recovery point of each Completer attempt.
const attemptPrefix = "!attempt/"

// Completer finishes abandoned operations of steps: an operation whose
// caller went away (a crash, a client that never retried) is resumed from
// its recovery point, as its caller's retry would have, by Func, the
// function the callers pass to Do. Each resumption is one attempt,
// recorded under the key; an operation that has had MaxAttempts is no
// longer run: its key is held as outcome-unknown (not lost), for an
// operator to resolve.
//
// idem stores keys as digests only, so the Completer does not find
// operations by itself: KeysFunc names the candidates (orders still
// pending after a while, say). A candidate that completed is replayed (no
// work), one that a caller is running is skipped, and one that never ran
// is run: the completer acts as its caller.
type Completer[T any] struct {
	Store Store
	// KeysFunc returns the keys of the operations that may be abandoned.
	KeysFunc func(ctx context.Context) ([]idem.Key, error)
	// Func is the operation, as its callers pass it to Do.
	Func func(ctx context.Context, op *Op) (T, error)
	// Options are the callers' Do options (the same Fingerprint, Lease
	// and Retention); Wait is ignored. Nil: the defaults.
	Options *idem.Options
	// MaxAttempts bounds the completer's attempts per operation (its
	// callers' own retries do not count). Zero means 5.
	MaxAttempts int
}

// Report is what one Completer pass did, in keys.
type Report struct {
	// Completed: the operation is finished now (by this pass, or before
	// it: a replay); Failed: finished with a *FailedError.
	Completed, Failed int
	// Held: the operation's key is held as outcome-unknown (an unfinished
	// HoldUnknown step, or MaxAttempts reached).
	Held int
	// Busy: another caller holds the key; Errors: the attempt failed and
	// released the key (a transient error, a store outage) and is tried
	// again by a later pass.
	Busy, Errors int
}

// RunOnce makes one pass over the keys KeysFunc returns: one attempt
// each, in order. It returns an error only when KeysFunc fails or ctx
// ends; the attempts' errors are counted in the Report.
func (c *Completer[T]) RunOnce(ctx context.Context) (Report, error) {
	var r Report
	if c.Store == nil || c.KeysFunc == nil || c.Func == nil {
		return r, &idem.ConfigError{Package: "step", Field: "Completer", Reason: "Store, KeysFunc and Func are required"}
	}
	keys, err := c.KeysFunc(ctx)
	if err != nil {
		return r, fmt.Errorf("step: completer: list keys: %w", err)
	}
	limit := c.MaxAttempts
	if limit <= 0 {
		limit = 5
	}
	var opts idem.Options
	if c.Options != nil {
		opts = *c.Options
	}
	opts.Wait = false
	for _, key := range keys {
		if err := ctx.Err(); err != nil {
			return r, err
		}
		_, err := do(ctx, c.Store, key, &opts, c.Func, limit)
		switch {
		case err == nil:
			r.Completed++
		case errors.Is(err, ErrFailed):
			r.Failed++
		case errors.Is(err, idem.ErrOutcomeUnknown):
			r.Held++
		case errors.Is(err, idem.ErrInFlight):
			r.Busy++
		default:
			r.Errors++
		}
	}
	return r, nil
}

// Run makes a pass every interval until ctx ends, and returns ctx's
// error.
func (c *Completer[T]) Run(ctx context.Context, interval time.Duration) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := c.RunOnce(ctx); err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// attempt records a completer attempt, or, when the operation has had
// limit of them, returns an error that makes Do hold the key.
func (op *Op) attempt(ctx context.Context, limit int) error {
	n := 0
	for name := range op.done {
		if strings.HasPrefix(name, attemptPrefix) {
			n++
		}
	}
	if n >= limit {
		return &GiveUpError{Key: op.owner.Key, Attempts: n}
	}
	return op.save(ctx, attemptPrefix+strconv.Itoa(n+1), nil)
}

// GiveUpError is a Completer's answer for an operation it resumed
// MaxAttempts times already: the key is held as outcome-unknown. It
// matches idem.ErrOutcomeUnknown.
type GiveUpError struct {
	Key      idem.Key
	Attempts int
}

func (e *GiveUpError) Error() string {
	return fmt.Sprintf("step: completer gave up on key %v after %d attempts; the key is held", e.Key, e.Attempts)
}

// Is makes a GiveUpError match idem.ErrOutcomeUnknown.
func (e *GiveUpError) Is(target error) bool { return target == idem.ErrOutcomeUnknown }
