package inbox

import (
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
