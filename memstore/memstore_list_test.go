package memstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

func TestList(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	idemtest.RunList(t, s)
}

// List runs while other goroutines claim, complete and release keys: it
// never blocks them for long, never returns more than limit records, and
// every record it returns is in the state asked for.
func TestListConcurrent(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: -1, Shards: 4})
	defer s.Close()
	ctx := context.Background()
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("w", fmt.Sprintf("%d-%d", w, i))})
				if err != nil {
					t.Error(err)
					return
				}
				if i%2 == 0 {
					err = s.Complete(ctx, c.Owner, nil)
				} else {
					err = s.Release(ctx, c.Owner)
				}
				if err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for range 50 {
		recs, err := s.List(ctx, idem.StateCompleted, false, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) > 10 {
			t.Fatalf("List returned %d records, limit 10", len(recs))
		}
		for _, r := range recs {
			if r.State != idem.StateCompleted {
				t.Fatalf("List(completed) returned %s", r.State)
			}
		}
	}
	close(stop)
	wg.Wait()
}

func TestDigestsWithPrefix(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	idemtest.RunDigestsWithPrefix(t, s)
}
