package optlock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// ErrConflict means a compare-and-set lost: the row's version was not the one
// the write expected (somebody else wrote first), or the row is gone. Table.Update
// returns it when its UPDATE affected no row; a Do callback returns it (or an
// error wrapping it) to ask for another attempt; Do returns an error wrapping it
// when the attempts run out.
var ErrConflict = errors.New("optlock: version conflict")

// Config bounds Do's retries. A nil *Config means the defaults.
type Config struct {
	// MaxAttempts is how many times Do calls fn at most. Default 5.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff before attempt n+1: a
	// uniformly random delay in [0, min(MaxDelay, BaseDelay·2ⁿ⁻¹)] ("full
	// jitter", so that contenders spread out instead of colliding again).
	// Defaults 5ms and 250ms.
	BaseDelay time.Duration
	MaxDelay  time.Duration
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.MaxAttempts == 0 {
		out.MaxAttempts = 5
	}
	if out.BaseDelay == 0 {
		out.BaseDelay = 5 * time.Millisecond
	}
	if out.MaxDelay == 0 {
		out.MaxDelay = 250 * time.Millisecond
	}
	return out
}

func (c *Config) validate() error {
	var errs []error
	if c.MaxAttempts < 1 {
		errs = append(errs, configError("Config.MaxAttempts", fmt.Sprintf("must be at least 1, got %d", c.MaxAttempts)))
	}
	if c.BaseDelay < 0 {
		errs = append(errs, configError("Config.BaseDelay", fmt.Sprintf("must not be negative, got %v", c.BaseDelay)))
	}
	if c.MaxDelay < c.BaseDelay {
		errs = append(errs, configError("Config.MaxDelay", fmt.Sprintf("%v is below BaseDelay (%v)", c.MaxDelay, c.BaseDelay)))
	}
	return errors.Join(errs...)
}

// backoff returns the delay before the attempt after attempt (1-based).
func (c *Config) backoff(attempt int) time.Duration {
	ceiling := c.MaxDelay
	if attempt-1 < 62 {
		if d := c.BaseDelay << (attempt - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}

// Do runs fn, the read-modify-write of one optimistic update, until it
// succeeds, fails with an error that is not a conflict, or has run
// cfg.MaxAttempts times. fn must read the row (and its version) afresh on every
// attempt (attempt counts from 1) and write with a version check, usually
// Table.Update; returning an error that wraps ErrConflict asks for another
// attempt after a jittered exponential backoff.
//
// Do returns nil on success, fn's error unchanged when it is not a conflict,
// an error wrapping ErrConflict when every attempt conflicted, and an error
// wrapping ctx.Err() when ctx ends first (fn is not called with a done ctx; a
// backoff sleep is cut short). A conflicting attempt wrote nothing, so giving
// up leaves the row exactly as the winners left it.
func Do(ctx context.Context, cfg *Config, fn func(ctx context.Context, attempt int) error) error {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for attempt := 1; ; attempt++ {
		if err := ctx.Err(); err != nil {
			if attempt == 1 {
				return err
			}
			return fmt.Errorf("optlock: gave up after %d conflicting attempt(s): %w", attempt-1, err)
		}
		err := fn(ctx, attempt)
		if err == nil || !errors.Is(err, ErrConflict) {
			return err
		}
		if attempt >= c.MaxAttempts {
			return fmt.Errorf("optlock: %d attempt(s), all conflicted; last: %w", attempt, err)
		}
		d := c.backoff(attempt)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("optlock: gave up after %d conflicting attempt(s): %w", attempt, ctx.Err())
		case <-timer.C:
		}
	}
}
