package inbox

import (
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/internal/clock"
)

// DefaultFastPathBackoff is how long the fast path is skipped after a failure
// before one call probes it again.
const DefaultFastPathBackoff = time.Second

// breaker keeps a failing FastPath out of the message path. Closed, every
// call goes to the fast path. After a failure it opens: calls skip the fast
// path (and go to the database alone) until the backoff has passed; then
// exactly one call probes it. A successful probe closes the breaker, a failed
// one opens it for another backoff. An outage therefore costs about one
// fast-path timeout per backoff interval (plus the calls that were already in
// flight when it began), not one per message.
type breaker struct {
	backoff   time.Duration
	now       func() time.Time
	openUntil atomic.Int64 // unix nanoseconds; 0 = closed
	probing   atomic.Bool  // a probe is in flight
}

// allow reports whether a call may use the fast path now. When it returns
// true for a half-open breaker, the caller is the probe and must report the
// result with success or failure.
func (b *breaker) allow() bool {
	until := b.openUntil.Load()
	if until == 0 {
		return true
	}
	if b.now().UnixNano() < until {
		return false
	}
	return b.probing.CompareAndSwap(false, true)
}

// success closes the breaker and reports whether it was open.
func (b *breaker) success() bool {
	was := b.openUntil.Swap(0) != 0
	b.probing.Store(false)
	return was
}

// failure opens the breaker for one backoff and reports whether it was closed.
func (b *breaker) failure() bool {
	// Saturated: a backoff past 2262 (the end of Unix nanoseconds) must
	// not wrap into the past and leave the breaker closed.
	was := b.openUntil.Swap(clock.Add(b.now().UnixNano(), b.backoff)) == 0
	b.probing.Store(false)
	return was
}
