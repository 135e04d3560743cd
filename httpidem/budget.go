package httpidem

import (
	"context"
	"sync"
	"time"
)

// MemoryBudget bounds the request bytes that middlewares hold in memory
// at once, for the whole process: the buffered bodies, their gzip-decoded
// form and the working memory of JSON canonicalisation and key lookup
// (JSONFingerprint, FingerprintPointers, KeyPointer) are all charged to it
// while a request holds them. A request that would pass the budget waits
// up to the budget's wait for bytes to be given back, then gets 503
// memory-budget with Retry-After; one that could never fit (it needs more
// than the whole budget) gets 413. Nothing is recorded for either.
//
// Middlewares with the same *MemoryBudget share it (Config.Budget);
// those with none share one of DefaultMemoryBudget bytes. A MemoryBudget
// is safe for concurrent use. (idemclient.Budget is another thing: a
// client's retry budget.)
type MemoryBudget struct {
	limit int64
	wait  time.Duration

	mu   sync.Mutex
	used int64
	// freed is made by a take that has to wait, and closed (and
	// forgotten) by the next give: while nobody waits, charging and
	// giving back allocate nothing.
	freed chan struct{}
}

// DefaultMemoryBudget is the budget of middlewares without Config.Budget,
// and idem proxy's --memory-budget: 256 MiB, for a small container.
const DefaultMemoryBudget = 256 << 20

// DefaultMemoryBudgetWait is how long a request waits for room in a
// MemoryBudget made by NewMemoryBudget with a zero wait.
const DefaultMemoryBudgetWait = time.Second

// NewMemoryBudget returns a budget of limit bytes; a request that finds
// it full waits up to wait (zero: DefaultMemoryBudgetWait; negative:
// not at all) for room. limit must be positive.
func NewMemoryBudget(limit int64, wait time.Duration) *MemoryBudget {
	if limit <= 0 {
		panic("httpidem: NewMemoryBudget: limit must be positive")
	}
	if wait == 0 {
		wait = DefaultMemoryBudgetWait
	}
	return &MemoryBudget{limit: limit, wait: max(wait, 0)}
}

// Limit is the budget's size in bytes.
func (b *MemoryBudget) Limit() int64 { return b.limit }

// InUse is how many bytes are charged to the budget now.
func (b *MemoryBudget) InUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// defaultBudget is the budget of every middleware without Config.Budget:
// one per process.
var defaultBudget = NewMemoryBudget(DefaultMemoryBudget, 0)

// take charges n bytes, waiting for room until the budget's wait or ctx
// ends. It reports false when it could not (nothing is then charged).
func (b *MemoryBudget) take(ctx context.Context, n int64) bool {
	if n > b.limit {
		return false
	}
	var timer *time.Timer
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return true
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		if timer == nil {
			if b.wait <= 0 {
				return false
			}
			timer = time.NewTimer(b.wait)
		}
		select {
		case <-freed:
		case <-timer.C:
			return false
		case <-ctx.Done():
			timer.Stop()
			return false
		}
	}
}

// give gives n bytes back.
func (b *MemoryBudget) give(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.freed != nil { // a take waits: wake it
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

// charge is one request's account with a MemoryBudget.
type charge struct {
	b    *MemoryBudget
	ctx  context.Context
	n    int64
	over *problem // why the last take failed
}

// take charges n more bytes to the request, or sets c.over and reports
// false.
func (c *charge) take(n int64) bool {
	if n <= 0 {
		return true
	}
	if !c.b.take(c.ctx, n) {
		c.over = &probBusy
		if c.n+n > c.b.limit {
			c.over = &probBodyTooLarge // it could never fit
		}
		return false
	}
	c.n += n
	return true
}

// give gives n of the request's bytes back.
func (c *charge) give(n int64) {
	n = min(n, c.n)
	c.n -= n
	c.b.give(n)
}

// done gives every byte of the request back.
func (c *charge) done() {
	if c.b != nil {
		c.give(c.n)
	}
}

// jsonCost is the working memory that canonicalising a JSON body of n
// bytes, or looking a pointer up in it, is charged: the canonical form
// reads the text once and allocates about its size (measured at 1 to 2
// times the body for wide arrays and objects), with room to spare.
func jsonCost(n int) int64 { return jsonCostFactor * int64(n) }

const jsonCostFactor = 3
