package idem_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func TestStoreError(t *testing.T) {
	t.Parallel()
	alive := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	driverTimeout := fmt.Errorf("failed to connect: timeout: %w", context.DeadlineExceeded)
	past := pastDeadline{Context: context.Background(), at: time.Now().Add(-time.Second)}
	reset := errors.New("read: connection reset by peer")
	for _, c := range []struct {
		name            string
		ctx             context.Context
		err             error
		unavailable     bool
		callerCancelled bool
	}{
		{"driver timeout, caller waiting", alive, driverTimeout, true, false},
		{"reset, caller waiting", alive, reset, true, false},
		{"already unavailable", alive, idem.StoreError(context.Background(), "x", reset), true, false},
		{"caller gave up", ended, driverTimeout, false, true},
		{"caller gave up during a reset", ended, reset, false, true},
		{"caller's deadline passed, its timer not yet fired", past, reset, false, false},
	} {
		err := idem.StoreError(c.ctx, "op", c.err)
		if idem.IsUnavailable(err) != c.unavailable || errors.Is(err, context.Canceled) != c.callerCancelled {
			t.Errorf("%s: StoreError = %v (unavailable %v, canceled %v)", c.name, err, idem.IsUnavailable(err), errors.Is(err, context.Canceled))
		}
		if c.unavailable && !errors.Is(err, c.err) && !errors.Is(c.err, idem.ErrUnavailable) && !errors.Is(c.err, context.DeadlineExceeded) {
			t.Errorf("%s: StoreError does not unwrap to the driver's error", c.name)
		}
		// A store's own timeout while the caller waits is no context
		// error (those say the caller gave up), but keeps its text and
		// says it is a timeout.
		if c.unavailable && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)) {
			t.Errorf("%s: StoreError = %v matches a context error while the caller waits", c.name, err)
		}
		var to interface{ Timeout() bool }
		if c.unavailable && errors.Is(c.err, context.DeadlineExceeded) && (!errors.As(err, &to) || !to.Timeout() || !strings.Contains(err.Error(), c.err.Error())) {
			t.Errorf("%s: StoreError = %v; want the driver's text and Timeout() true", c.name, err)
		}
	}
	// A driver's own error types stay visible to errors.As (Attempt retries
	// a finishing call its driver says was never sent).
	var safe interface{ SafeToRetry() bool }
	if err := idem.StoreError(alive, "op", safeTimeout{}); !errors.As(err, &safe) || !safe.SafeToRetry() || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("StoreError of a driver's safe-to-retry timeout = %v; want it found by errors.As, not a context error", err)
	}
	if err := idem.StoreError(past, "op", reset); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("StoreError after the caller's deadline = %v, want context.DeadlineExceeded", err)
	}
	if idem.StoreError(alive, "op", nil) != nil {
		t.Errorf("StoreError(nil) != nil")
	}
}

// pastDeadline is a context whose deadline has passed while its Err is
// still nil: a driver that set its connection's deadline to the context's
// can fail a moment before the context's own timer fires.
type pastDeadline struct {
	context.Context
	at time.Time
}

func (p pastDeadline) Deadline() (time.Time, bool) { return p.at, true }

// safeTimeout is a driver's connect timeout that says it never reached
// the server.
type safeTimeout struct{}

func (safeTimeout) Error() string     { return "connect: " + context.DeadlineExceeded.Error() }
func (safeTimeout) Unwrap() error     { return context.DeadlineExceeded }
func (safeTimeout) SafeToRetry() bool { return true }
