package inbox

import (
	"fmt"
	"sync"
	"time"

	"github.com/bits-and-blooms/bloom/v3"
)

// BloomConfig sizes the in-process Bloom prefilter.
//
// The filter is a ring of Generations Bloom filters. New IDs go into the
// newest; a lookup asks all of them. Every Window/(Generations-1) the oldest
// generation is dropped and an empty one becomes the newest, so no deletion
// is ever needed. An ID therefore stays "maybe seen" for at least Window and
// at most Window*Generations/(Generations-1) after it was added (with the
// default 3 generations and 1 hour: between 60 and 90 minutes).
//
// A lookup's false-positive rate is about Generations × FalsePositiveRate
// while no generation holds more than Capacity IDs (3 × 1% = 3% by default);
// beyond Capacity it grows. Memory is about 1.44 × log2(1/FalsePositiveRate)
// bits per ID of capacity per generation: 9.6 bits at 1%, so the defaults
// (1,000,000 per generation, 3 generations) take about 3.6 MB. Size Capacity
// for the messages one consumer process handles in Window/(Generations-1).
type BloomConfig struct {
	Window            time.Duration // how long an ID is remembered at least; default 1h
	Generations       int           // filters in the ring, at least 2; default 3
	Capacity          uint          // expected IDs per generation; default 1,000,000
	FalsePositiveRate float64       // per generation, in (0, 0.5]; default 0.01
}

func (c BloomConfig) withDefaults() BloomConfig {
	if c.Window == 0 {
		c.Window = time.Hour
	}
	if c.Generations == 0 {
		c.Generations = 3
	}
	if c.Capacity == 0 {
		c.Capacity = 1_000_000
	}
	if c.FalsePositiveRate == 0 {
		c.FalsePositiveRate = 0.01
	}
	return c
}

func (c BloomConfig) validate() error {
	switch {
	case c.Window < 0:
		return configError("Config.Bloom.Window", fmt.Sprintf("%v is negative", c.Window))
	case c.Generations < 2 || c.Generations > 64:
		return configError("Config.Bloom.Generations", fmt.Sprintf("%d is not in [2, 64]", c.Generations))
	case c.FalsePositiveRate <= 0 || c.FalsePositiveRate > 0.5:
		return configError("Config.Bloom.FalsePositiveRate", fmt.Sprintf("%v is not in (0, 0.5]", c.FalsePositiveRate))
	case c.Window/time.Duration(c.Generations-1) <= 0:
		return configError("Config.Bloom.Window", fmt.Sprintf("%v is too short for %d generations", c.Window, c.Generations))
	}
	return nil
}

// bloomRing is the generational filter. It is safe for concurrent use.
type bloomRing struct {
	cfg    BloomConfig
	period time.Duration
	now    func() time.Time

	mu    sync.RWMutex
	gens  []*bloom.BloomFilter // gens[0] is the newest
	start time.Time            // when gens[0] became the newest
}

func newBloomRing(cfg BloomConfig, now func() time.Time) *bloomRing {
	r := &bloomRing{
		cfg:    cfg,
		period: cfg.Window / time.Duration(cfg.Generations-1),
		now:    now,
		gens:   make([]*bloom.BloomFilter, cfg.Generations),
		start:  now(),
	}
	for i := range r.gens {
		r.gens[i] = bloom.NewWithEstimates(cfg.Capacity, cfg.FalsePositiveRate)
	}
	return r
}

// rotateLocked drops the generations that have aged out. A clock that jumps
// back is ignored (the ring waits); one that jumps forward clears generations
// early. Either costs only speed, never correctness.
func (r *bloomRing) rotateLocked(now time.Time) {
	elapsed := now.Sub(r.start)
	if elapsed < r.period {
		return
	}
	steps := int(elapsed / r.period)
	if steps > len(r.gens) {
		steps = len(r.gens)
	}
	for range steps {
		oldest := r.gens[len(r.gens)-1]
		copy(r.gens[1:], r.gens[:len(r.gens)-1])
		oldest.ClearAll()
		r.gens[0] = oldest
	}
	if int(elapsed/r.period) > len(r.gens) {
		r.start = now
	} else {
		r.start = r.start.Add(time.Duration(steps) * r.period)
	}
}

func (r *bloomRing) needsRotation(now time.Time) bool { return now.Sub(r.start) >= r.period }

// mayContain reports false when b was certainly not added within the window.
func (r *bloomRing) mayContain(b []byte) bool {
	now := r.now()
	r.mu.RLock()
	if r.needsRotation(now) {
		r.mu.RUnlock()
		r.mu.Lock()
		r.rotateLocked(now)
		r.mu.Unlock()
		r.mu.RLock()
	}
	defer r.mu.RUnlock()
	for _, g := range r.gens {
		if g.Test(b) {
			return true
		}
	}
	return false
}

func (r *bloomRing) add(b []byte) {
	now := r.now()
	r.mu.Lock()
	r.rotateLocked(now)
	r.gens[0].Add(b)
	r.mu.Unlock()
}
