package adapter

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

// Knobs point at the fields every adapter's Config has under the same
// names, so that one function gives them their defaults.
type Knobs struct {
	MaxFailures          *int
	BackoffFunc          *func(failures int) time.Duration
	TransientBackoffFunc *func(attempt int) time.Duration
	ProcessTimeout       *time.Duration
	MaxParked            *int
	Logger               **slog.Logger
	// Concurrency and ParkTimeout: nil for an adapter without them (Kafka
	// runs a worker per partition and parks until applied).
	Concurrency *int
	ParkTimeout *time.Duration
}

// Defaults sets each zero knob to the default every adapter documents:
// MaxFailures 5, BackoffFunc backoff (the adapter's DefaultBackoff),
// TransientBackoffFunc TransientBackoff, ProcessTimeout 30s, MaxParked
// 100, Logger slog.Default(), Concurrency 1, ParkTimeout 30s (when not
// positive).
func (k Knobs) Defaults(backoff func(int) time.Duration) {
	if *k.MaxFailures == 0 {
		*k.MaxFailures = 5
	}
	if *k.BackoffFunc == nil {
		*k.BackoffFunc = backoff
	}
	if *k.TransientBackoffFunc == nil {
		*k.TransientBackoffFunc = TransientBackoff
	}
	if *k.ProcessTimeout == 0 {
		*k.ProcessTimeout = 30 * time.Second
	}
	if *k.MaxParked == 0 {
		*k.MaxParked = 100
	}
	if *k.Logger == nil {
		*k.Logger = slog.Default()
	}
	if k.Concurrency != nil && *k.Concurrency == 0 {
		*k.Concurrency = 1
	}
	if k.ParkTimeout != nil && *k.ParkTimeout <= 0 {
		*k.ParkTimeout = 30 * time.Second
	}
}

// Check rejects, with a *idem.ConfigError of package pkg, the shared
// knobs the engine cannot run with: MaxFailures below 1, or a consumer
// name the inbox would refuse (CheckConsumer).
func Check(pkg, consumer string, maxFailures int) error {
	if maxFailures < 1 {
		return &idem.ConfigError{Package: pkg, Field: "Config.MaxFailures", Reason: fmt.Sprintf("must be at least 1, got %d", maxFailures)}
	}
	return CheckConsumer(pkg, consumer)
}
