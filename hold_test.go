package idem_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// extendCounter is a store that reports each heartbeat's first renewal.
type extendCounter struct {
	idem.Store
	mu      sync.Mutex
	renewed map[idem.Key]chan struct{}
}

func (s *extendCounter) Extend(ctx context.Context, o idem.Owner, d time.Duration) error {
	s.mu.Lock()
	if ch, ok := s.renewed[o.Key]; ok {
		close(ch)
		delete(s.renewed, o.Key)
	}
	s.mu.Unlock()
	return s.Store.Extend(ctx, o, d)
}

// TestHeartbeatsShareOneSchedule: every heartbeat of the process runs on
// one renewal loop. Under heartbeats started and stopped from many
// goroutines, with leases of many lengths, each heartbeat that keeps
// running gets its renewal: none is lost from the schedule.
func TestHeartbeatsShareOneSchedule(t *testing.T) {
	t.Parallel()
	ms := memstore.New(&memstore.Config{SweepInterval: -1})
	defer ms.Close()
	s := &extendCounter{Store: ms, renewed: map[idem.Key]chan struct{}{}}
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				key := idem.MustKey("hb", fmt.Sprintf("%d-%d", g, i))
				lease := time.Duration(30+(g*7+i*13)%90) * time.Millisecond
				c, err := s.Begin(ctx, idem.BeginRequest{Key: key, Lease: lease, Retention: time.Hour})
				if err != nil || c.Outcome != idem.Acquired {
					t.Errorf("Begin: %v, %v", c.Outcome, err)
					return
				}
				keep := i%4 == 0 // kept until renewed; the others stop at once
				var renewed chan struct{}
				if keep {
					renewed = make(chan struct{})
					s.mu.Lock()
					s.renewed[key] = renewed
					s.mu.Unlock()
				}
				var a idem.Attempt
				work, err := a.Start(ctx, &idem.Claimer{Store: s}, idem.Ticket{Claim: c, Sent: time.Now(), Lease: lease})
				if err != nil {
					t.Errorf("Start: %v", err)
					return
				}
				if keep {
					// Renewed, or (on a machine too loaded to renew in
					// time) given up: either way its tick ran. Bounded
					// by the test's timeout only.
					select {
					case <-renewed:
					case <-work.Done():
					}
				}
				a.End()
			}
		}()
	}
	wg.Wait()
}
