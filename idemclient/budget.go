package idemclient

import (
	"fmt"
	"sync"
)

// Budget is a retry budget: a token bucket shared by every request of one
// or more Transports, in the manner of gRPC's retry throttling and the AWS
// SDKs' retry quota. Requests earn tokens, retries spend them:
//
//   - the bucket starts full, with Capacity tokens;
//   - each logical request that may be retried adds Ratio tokens (never
//     more than Capacity in all);
//   - each retry takes one token, and a retry that finds less than one
//     token is not made: the request ends with the last answer or error.
//
// So over any stretch of time, retries ≤ Capacity + Ratio × requests,
// whatever the failures: in a total outage a client makes at most
// (1 + Ratio) × requests + Capacity attempts, and a fleet of clients cannot
// turn an outage into a retry storm. With the defaults (Ratio 0.1,
// Capacity 10) that is 1.1 attempts per request, plus 10.
//
// A Budget is safe for concurrent use. Share one between Transports to
// give them one budget (Config.Budget).
type Budget struct {
	ratio    float64
	capacity float64

	mu     sync.Mutex
	tokens float64
}

// Budget defaults.
const (
	DefaultBudgetRatio    = 0.1
	DefaultBudgetCapacity = 10
)

// NewBudget returns a full budget that earns ratio tokens per request and
// holds at most capacity. ratio must be at least 0 and capacity at least 1.
func NewBudget(ratio, capacity float64) (*Budget, error) {
	if !(ratio >= 0) {
		return nil, configError("ratio", fmt.Sprintf("%v: want at least 0", ratio))
	}
	if !(capacity >= 1) {
		return nil, configError("capacity", fmt.Sprintf("%v: want at least 1", capacity))
	}
	return &Budget{ratio: ratio, capacity: capacity, tokens: capacity}, nil
}

func defaultBudget() *Budget {
	return &Budget{ratio: DefaultBudgetRatio, capacity: DefaultBudgetCapacity, tokens: DefaultBudgetCapacity}
}

// Tokens returns the tokens in the bucket now: how many retries may be
// made before requests earn more.
func (b *Budget) Tokens() float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tokens
}

// earn adds one request's share.
func (b *Budget) earn() {
	if b.ratio == 0 {
		return
	}
	b.mu.Lock()
	b.tokens = min(b.tokens+b.ratio, b.capacity)
	b.mu.Unlock()
}

// spend takes one token for a retry, if there is one.
func (b *Budget) spend() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}
