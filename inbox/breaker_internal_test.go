package inbox

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestBreakerOneProbe: while open nobody passes; once the backoff has passed
// exactly one of many concurrent callers probes; a failed probe opens it for
// another backoff, a successful one closes it.
func TestBreakerOneProbe(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	b := &breaker{backoff: time.Second, now: clk.now}
	if !b.allow() {
		t.Fatal("closed breaker refused")
	}
	if !b.failure() {
		t.Fatal("first failure did not report the transition")
	}
	passes := func() int64 {
		var n atomic.Int64
		var wg sync.WaitGroup
		for range 50 {
			wg.Go(func() {
				if b.allow() {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return n.Load()
	}
	if n := passes(); n != 0 {
		t.Fatalf("%d calls passed an open breaker", n)
	}
	clk.add(time.Second)
	if n := passes(); n != 1 {
		t.Fatalf("%d probes after the backoff, want 1", n)
	}
	if b.failure() {
		t.Fatal("a failed probe reported a closed→open transition")
	}
	if n := passes(); n != 0 {
		t.Fatalf("%d calls passed right after a failed probe", n)
	}
	clk.add(time.Second)
	if n := passes(); n != 1 {
		t.Fatalf("%d probes after the second backoff, want 1", n)
	}
	if !b.success() {
		t.Fatal("a successful probe did not report recovery")
	}
	if n := passes(); n != 50 {
		t.Fatalf("%d of 50 calls passed a closed breaker", n)
	}
}

// TestBreakerBackoffForever: a FastPathBackoff of math.MaxInt64 keeps the
// breaker open for good. Its end is kept in Unix nanoseconds, which end in
// 2262: it must saturate there, not wrap into the past and let every call
// through again.
func TestBreakerBackoffForever(t *testing.T) {
	clk := &fakeClock{t: time.Now()}
	b := &breaker{backoff: math.MaxInt64, now: clk.now}
	b.failure()
	for _, later := range []time.Duration{0, time.Hour, 200 * 365 * 24 * time.Hour} {
		clk.add(later)
		if b.allow() {
			t.Fatalf("breaker opened for MaxInt64 let a call through %v later", later)
		}
	}
}
