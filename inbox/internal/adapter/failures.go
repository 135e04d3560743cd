package adapter

import "sync"

// maxTracked bounds FailureCounts: one entry per message that failed and
// has not succeeded or been dead-lettered since.
const maxTracked = 100_000

// FailureCounts is the poison budget spent per message, kept in the
// subscriber's memory: a count in a message header could be set by any
// producer, and a broker's delivery count also grows for deliveries that
// never failed (a timeout while the message waited in a buffer). A restart
// starts the counts again; when more than 100,000 messages are failing at
// once, one count is forgotten for each new one. Safe for concurrent use;
// the empty key is never counted. The zero value holds no counts.
type FailureCounts struct {
	mu sync.Mutex
	n  map[string]int
}

// NewFailureCounts returns empty counts.
func NewFailureCounts() *FailureCounts { return &FailureCounts{n: map[string]int{}} }

// Add counts one more failure of key and returns the new count.
func (f *FailureCounts) Add(key string) int {
	if key == "" {
		return 1
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == nil {
		f.n = map[string]int{}
	}
	n := f.n[key]
	if n == 0 && len(f.n) >= maxTracked {
		for k := range f.n {
			delete(f.n, k)
			break
		}
	}
	f.n[key] = n + 1
	return n + 1
}

// Get returns key's count.
func (f *FailureCounts) Get(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[key]
}

// Forget drops key's count (the message succeeded or was dead-lettered).
func (f *FailureCounts) Forget(key string) {
	f.mu.Lock()
	delete(f.n, key)
	f.mu.Unlock()
}
