package redisstore

import (
	"math"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestDecodeInFlightSaturates: the begin script computes in doubles, and
// 2^53 < math.MaxInt64/1000, so the microseconds it reports left on a
// lease of math.MaxInt64 nanoseconds can be one more than the largest
// Duration holds (the lease, 9223372036854775µs, is odd and rounds up).
// The claim must still say "in flight for centuries", never a negative
// wait.
func TestDecodeInFlightSaturates(t *testing.T) {
	for _, us := range []int64{math.MaxInt64 / 1000, math.MaxInt64/1000 + 1, math.MaxInt64} {
		c, err := decodeBegin([]any{int64(3), us})
		if err != nil {
			t.Fatal(err)
		}
		if c.Outcome != idem.InFlight || c.RetryAfter < time.Duration(math.MaxInt64/1000*1000) {
			t.Errorf("decodeBegin(in flight, %dµs) = %v, RetryAfter %v; want in flight for about 292 years", us, c.Outcome, c.RetryAfter)
		}
	}
}
