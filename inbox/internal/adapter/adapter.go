package adapter

import (
	"fmt"
	"runtime/debug"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
)

// Header names on a dead-lettered copy, one spelling for every broker.
// Each adapter exports those it sets.
const (
	ErrorHeader    = "Idem-Error"    // the last processing error, at most MaxErrorBytes
	FailuresHeader = "Idem-Failures" // attempts that failed with an ordinary error
)

// MaxErrorBytes bounds the error text in ErrorHeader.
const MaxErrorBytes = 1024

// Doubling is first after the first failed attempt, doubled for each
// further one, and never more than max. Attempts below 1 count as the first.
func Doubling(first, max time.Duration, attempt uint64) time.Duration {
	d := first
	for i := uint64(1); i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// CheckConsumer rejects a Config.Consumer the inbox would refuse on every
// message: longer than inbox.MaxIDBytes, with a *idem.ConfigError of
// package pkg.
func CheckConsumer(pkg, consumer string) error {
	if len(consumer) > inbox.MaxIDBytes {
		return &idem.ConfigError{Package: pkg, Field: "Config.Consumer", Reason: fmt.Sprintf("is %d bytes, the inbox allows %d", len(consumer), inbox.MaxIDBytes)}
	}
	return nil
}

// Truncate cuts s to at most n bytes, for error text sent in a header or a
// termination reason that the broker bounds.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// CallHandler runs h, the application's handler, and turns a panic into
// an error of that message (with the panic's value and the start of its
// stack), so that the adapter's verdict rules apply — retried, then
// dead-lettered — instead of the process dying on every redelivery.
func CallHandler(pkg string, h func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%s: the handler panicked: %v\n%s", pkg, r, Truncate(string(debug.Stack()), 2048))
		}
	}()
	return h()
}
