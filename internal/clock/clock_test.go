package clock

import (
	"math"
	"testing"
	"time"
)

func TestAdd(t *testing.T) {
	now := time.Now().UnixNano()
	for _, c := range []struct {
		name string
		t    int64
		d    time.Duration
		want int64
	}{
		{"small", 10, 5, 15},
		{"zero", now, 0, now},
		{"negative", now, -time.Second, now - int64(time.Second)},
		{"max from zero", 0, math.MaxInt64, math.MaxInt64},
		{"max from one", 1, math.MaxInt64, math.MaxInt64},
		{"max from now", now, math.MaxInt64, math.MaxInt64},
		{"max-1ns from 2", 2, math.MaxInt64 - 1, math.MaxInt64},
		{"just fits", 1, math.MaxInt64 - 1, math.MaxInt64},
		{"overflows only from now", now, time.Duration(math.MaxInt64 - now + 1), math.MaxInt64},
		{"fits from now", now, time.Duration(math.MaxInt64 - now), math.MaxInt64},
		{"min", -1, math.MinInt64, math.MinInt64},
		{"min from now", -now, math.MinInt64 + 1, math.MinInt64},
		{"max clock minus", math.MaxInt64, -1, math.MaxInt64 - 1},
	} {
		if got := Add(c.t, c.d); got != c.want {
			t.Errorf("%s: Add(%d, %d) = %d, want %d", c.name, c.t, int64(c.d), got, c.want)
		}
	}
}

func TestMicros(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want time.Duration
	}{
		{0, 0},
		{1, time.Microsecond},
		{-3, -3 * time.Microsecond},
		{math.MaxInt64 / 1000, time.Duration(math.MaxInt64 / 1000 * 1000)},
		{math.MaxInt64/1000 + 1, math.MaxInt64}, // a Lua double rounded up
		{math.MaxInt64, math.MaxInt64},
		{math.MinInt64 / 1000, time.Duration(math.MinInt64 / 1000 * 1000)},
		{math.MinInt64/1000 - 1, math.MinInt64},
	} {
		if got := Micros(c.n); got != c.want {
			t.Errorf("Micros(%d) = %d, want %d", c.n, int64(got), int64(c.want))
		}
	}
}
