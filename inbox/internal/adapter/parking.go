package adapter

import (
	"sync"
	"sync/atomic"
	"time"
)

// Parking keeps a subscriber's early messages (inbox.ErrNotYet: their
// predecessor has not been applied) aside, unsettled, so that they are run
// again as soon as another message was applied: a gap fills in one pass
// instead of one redelivery round per missing version. Safe for
// concurrent use.
type Parking[T any] struct {
	max     int
	mu      sync.Mutex
	items   []Parked[T] // newest last: tried newest first (a reversed run applies in one pass)
	keys    map[string]time.Time
	gen     atomic.Uint64 // Applied calls so far
	drain   atomic.Bool   // one drainer at a time
	again   atomic.Bool   // an apply happened while draining: pass again
	open    atomic.Bool   // Open was called: the subscriber's keeper runs
	closing atomic.Bool
}

// Parked is one parked message and when it was first parked.
type Parked[T any] struct {
	Key   string
	Msg   T
	Since time.Time
}

// NewParking holds at most max messages; max < 1 parks nothing.
func NewParking[T any](max int) *Parking[T] {
	return &Parking[T]{max: max, keys: map[string]time.Time{}}
}

// Open lets the lot park: the subscriber's keeper runs (it reports the
// parked messages in progress and hands them back in time).
func (p *Parking[T]) Open() {
	if p != nil {
		p.open.Store(true)
	}
}

// MayPark reports whether an early message may be parked now: the lot
// parks at all, is open and not closed.
func (p *Parking[T]) MayPark(T) bool {
	return p != nil && p.max > 0 && p.open.Load() && !p.closing.Load()
}

// Park keeps msg under key; false when the lot is full or closed (the
// caller hands the message back to the broker instead). A message parked
// again keeps the time it was first parked.
func (p *Parking[T]) Park(key string, msg T) bool {
	if p == nil || p.max < 1 || p.closing.Load() {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.items) >= p.max {
		return false
	}
	since, ok := p.keys[key]
	if !ok {
		since = time.Now()
		p.keys[key] = since
	}
	p.items = append(p.items, Parked[T]{Key: key, Msg: msg, Since: since})
	return true
}

// Forget drops key's first-parked time (the message was settled).
func (p *Parking[T]) Forget(key string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	delete(p.keys, key)
	p.mu.Unlock()
}

// Len returns how many messages are parked.
func (p *Parking[T]) Len() int {
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.items)
}

// take removes and returns every parked message, newest first.
func (p *Parking[T]) take() []Parked[T] {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.items
	p.items = nil
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Applied is called after a message was applied: run calls retry for the
// parked messages, newest first, and again while any of them applies.
// retry reports whether its message was applied (a message still early is
// parked again by retry itself). Only one caller drains at a time; one
// that finds a drain running makes it pass once more.
func (p *Parking[T]) Applied(retry func(Parked[T]) bool) {
	if p == nil || p.max < 1 {
		return
	}
	p.gen.Add(1)
	if !p.drain.CompareAndSwap(false, true) {
		p.again.Store(true)
		return
	}
	defer p.drain.Store(false)
	for {
		p.again.Store(false)
		progress := false
		for _, it := range p.take() {
			if retry(it) {
				progress = true
			}
		}
		if !progress && !p.again.Load() {
			return
		}
	}
}

// Gen counts the applied messages so far: a caller whose message came
// early while Gen moved (another message was applied during its attempt)
// runs it again at once rather than parking it.
func (p *Parking[T]) Gen() uint64 {
	if p == nil {
		return 0
	}
	return p.gen.Load()
}

// Sweep removes and returns the messages parked before cutoff (they are
// handed back to the broker), and calls keep for the others (to tell the
// broker they are still in progress).
func (p *Parking[T]) Sweep(cutoff time.Time, keep func(T)) []Parked[T] {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	var old []Parked[T]
	kept := p.items[:0]
	var alive []T
	for _, it := range p.items {
		if it.Since.Before(cutoff) {
			old = append(old, it)
			delete(p.keys, it.Key)
			continue
		}
		kept = append(kept, it)
		alive = append(alive, it.Msg)
	}
	p.items = kept
	p.mu.Unlock()
	for _, m := range alive {
		keep(m)
	}
	return old
}

// Close parks nothing more and returns every parked message (to be handed
// back).
func (p *Parking[T]) Close() []Parked[T] {
	if p == nil {
		return nil
	}
	p.closing.Store(true)
	out := p.take()
	p.mu.Lock()
	p.keys = map[string]time.Time{}
	p.mu.Unlock()
	return out
}
