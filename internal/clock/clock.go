// Package clock is the arithmetic of the times idem's stores keep: a
// clock reading plus a lease, a retention or a backoff. Durations come
// from callers and configuration unchecked, up to math.MaxInt64
// nanoseconds (292 years), and a plain int64 sum past the end of the range
// wraps to a date in the past: a claim taken "forever" would look expired
// at once, and a second caller would acquire the key. Here a sum that does
// not fit saturates at the far future instead, the way time.Time.Add
// does.
//
// Every store that adds a duration to an integer clock (memstore's
// nanoseconds since its start, tiered's and the inbox's bypass deadlines
// in Unix nanoseconds) goes through Add, and every store that turns a
// remaining time counted by its server (microseconds from SQL and the
// Redis scripts) back into a time.Duration goes through Micros. The SQL
// and Lua arithmetic itself counts microseconds, where the largest
// duration (9.2e15 µs) plus today's clock stays far inside int64 and the
// doubles of Lua: it cannot wrap there.
package clock

import (
	"math"
	"time"
)

// Add returns t + d, saturated at math.MaxInt64 (and math.MinInt64) when
// the sum does not fit: the far future is never turned into the past.
func Add(t int64, d time.Duration) int64 {
	s := t + int64(d)
	switch {
	case d > 0 && s < t:
		return math.MaxInt64
	case d < 0 && s > t:
		return math.MinInt64
	}
	return s
}

// Micros returns n microseconds as a Duration, saturated at the largest
// (and smallest) Duration when n does not fit. A Redis script computes in
// doubles, so the time it reports left on a lease of math.MaxInt64
// nanoseconds can exceed the largest Duration by a microsecond; multiplied
// as is, it would turn negative.
func Micros(n int64) time.Duration {
	const per = int64(time.Microsecond)
	switch {
	case n > math.MaxInt64/per:
		return math.MaxInt64
	case n < math.MinInt64/per:
		return math.MinInt64
	}
	return time.Duration(n * per)
}
