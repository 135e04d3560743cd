package adapter

import (
	"context"
	"errors"
	"time"

	"github.com/idemkit/idem/inbox"
)

// Verdict is what an adapter does after a failed attempt.
type Verdict uint8

const (
	// Retry: an ordinary failure. It spends one unit of the message's
	// poison budget; the message is tried again after a backoff.
	Retry Verdict = iota + 1
	// Transient: an infrastructure failure (inbox.IsTransient, or the
	// attempt's own timeout expired). Retried with backoff for as long as
	// it lasts; never spends the poison budget.
	Transient
	// Permanent: inbox.Permanent. Dead-letter now.
	Permanent
	// NotYet: the message came before one it depends on (inbox.ErrNotYet,
	// e.g. watermark.ErrGap), and Process already waited for it a little.
	// Hand it back for a later redelivery (its predecessor may be behind
	// it in the same queue: never hold it in place); never spends the
	// poison budget.
	NotYet
)

func (v Verdict) String() string {
	switch v {
	case Retry:
		return "retry"
	case Transient:
		return "transient"
	case Permanent:
		return "permanent"
	case NotYet:
		return "not-yet"
	}
	return "Verdict(?)"
}

// Classify returns the verdict on err, the error of an attempt run under
// attemptCtx (a child of the subscriber's context with the per-attempt
// timeout). The caller checks first whether the subscriber is stopping.
func Classify(attemptCtx context.Context, err error) Verdict {
	switch {
	case inbox.IsPermanent(err):
		return Permanent
	case errors.Is(err, inbox.ErrNotYet):
		return NotYet
	case inbox.IsTransient(err):
		return Transient
	case errors.Is(context.Cause(attemptCtx), errAttemptTimeout):
		// The database (or whatever the handler waited for) did not answer
		// within the attempt timeout: a black-holed connection looks like
		// this. Not the message's fault.
		return Transient
	}
	return Retry
}

var errAttemptTimeout = errors.New("attempt timed out")

// AttemptContext bounds one attempt (Process call) by timeout; timeout <= 0
// means no bound. Classify recognises its expiry.
func AttemptContext(ctx context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	if timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeoutCause(ctx, timeout, errAttemptTimeout)
}

// TransientBackoff is the wait before the attempt-th retry of an
// infrastructure failure: 100ms doubling, at most 5s, so that a consumer
// notices a recovered database within seconds.
func TransientBackoff(attempt int) time.Duration {
	return Doubling(100*time.Millisecond, 5*time.Second, uint64(max(attempt, 0)))
}

// Sleep waits d, or until one of the channels is closed or ctx ends; it
// reports whether the full d elapsed.
func Sleep(ctx context.Context, d time.Duration, quit <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-quit:
		return false
	}
}

// HoldAlive waits d (negative: until cut short), calling keep at once and
// then every interval (to tell the broker the message is still being
// worked on); it reports whether the full d elapsed, false when ctx ended
// or quit was closed first.
func HoldAlive(ctx context.Context, d, interval time.Duration, quit <-chan struct{}, keep func()) bool {
	deadline := time.Now().Add(d)
	for {
		// The failed attempt itself may have taken a good part of the
		// broker's patience: keep first.
		keep()
		step := interval
		if d >= 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return true
			}
			step = min(left, interval)
		}
		if !Sleep(ctx, step, quit) {
			return false
		}
	}
}
