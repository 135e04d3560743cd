package inbox

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

func TestBloomRingRotation(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	cfg := BloomConfig{Window: time.Hour, Generations: 3, Capacity: 1000, FalsePositiveRate: 0.001}
	r := newBloomRing(cfg, clock)
	period := 30 * time.Minute // Window / (Generations-1)

	r.add([]byte("x"))
	if !r.mayContain([]byte("x")) {
		t.Fatal("x not found right after add")
	}
	// x must stay for at least Window…
	now = now.Add(period)
	r.add([]byte("y"))
	now = now.Add(period - time.Nanosecond)
	if !r.mayContain([]byte("x")) {
		t.Fatal("x forgotten before Window elapsed")
	}
	// …and be gone after Generations periods.
	now = now.Add(period + time.Nanosecond)
	if r.mayContain([]byte("x")) {
		t.Fatal("x still present after 3 periods")
	}
	if !r.mayContain([]byte("y")) {
		t.Fatal("y (added one period later) already gone")
	}
	// A forward clock jump clears everything; a backward one keeps the ring.
	now = now.Add(24 * time.Hour)
	if r.mayContain([]byte("y")) {
		t.Fatal("y survived a day-long jump")
	}
	r.add([]byte("z"))
	now = now.Add(-2 * time.Hour)
	if !r.mayContain([]byte("z")) {
		t.Fatal("z lost on a backward clock jump")
	}
}

func TestBloomRingNoFalseNegativesConcurrent(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := newBloomRing(BloomConfig{Window: time.Hour, Generations: 3, Capacity: 10_000, FalsePositiveRate: 0.01}, clock)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 1000 {
				b := []byte(fmt.Sprintf("%d-%d", w, i))
				r.add(b)
				if !r.mayContain(b) {
					t.Errorf("%s missing right after add", b)
					return
				}
				if i%250 == 0 {
					mu.Lock()
					now = now.Add(time.Minute) // rotations while others read
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
}
