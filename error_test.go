package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
)

func TestStoreError(t *testing.T) {
	t.Parallel()
	alive := context.Background()
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	driverTimeout := fmt.Errorf("failed to connect: timeout: %w", context.DeadlineExceeded)
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
		{"already unavailable", alive, idem.Unavailable("x", reset), true, false},
		{"caller gave up", ended, driverTimeout, false, true},
		{"caller gave up during a reset", ended, reset, false, true},
	} {
		err := idem.StoreError(c.ctx, "op", c.err)
		if idem.IsUnavailable(err) != c.unavailable || errors.Is(err, context.Canceled) != c.callerCancelled {
			t.Errorf("%s: StoreError = %v (unavailable %v, canceled %v)", c.name, err, idem.IsUnavailable(err), errors.Is(err, context.Canceled))
		}
		if c.unavailable && !errors.Is(err, c.err) && !errors.Is(c.err, idem.ErrUnavailable) {
			t.Errorf("%s: StoreError does not unwrap to the driver's error", c.name)
		}
	}
	if idem.StoreError(alive, "op", nil) != nil {
		t.Errorf("StoreError(nil) != nil")
	}
}
