package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// MaxEntries bounds the whole store, however the keys fall on its shards:
// with 64 shards and a bound of 100, exactly 100 live records fit.
func TestMaxEntriesBoundsWholeStore(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{Shards: 64, MaxEntries: 100, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	for i := range 100 {
		if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("k-%d", i))}); err != nil {
			t.Fatalf("record %d of 100: %v", i+1, err)
		}
	}
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", "one-too-many")}); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("record 101 of 100 = %v, want ErrFull", err)
	}
	// Keys already stored still answer.
	if c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", "k-7")}); err != nil || c.Outcome != idem.InFlight {
		t.Fatalf("Begin of a stored key in a full store = %v, %v; want InFlight", c.Outcome, err)
	}
	if s.Len() != 100 {
		t.Fatalf("Len = %d, want 100", s.Len())
	}
}

// ErrFull only when the live records reach the bound: expired ones on any
// shard are swept to make room.
func TestFullStoreSweepsExpiredOnAnyShard(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{Shards: 16, MaxEntries: 40, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	for i := range 20 {
		if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("short-%d", i)), Lease: time.Millisecond, Retention: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("live-%d", i))}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond) // the short records expire
	for i := range 20 {
		if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("new-%d", i))}); err != nil {
			t.Fatalf("new record %d with 20 expired records to sweep: %v", i, err)
		}
	}
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", "over")}); !errors.Is(err, memstore.ErrFull) {
		t.Fatalf("Begin with 40 live records of 40 = %v, want ErrFull", err)
	}
}

// Racing Begins of unique keys never overshoot the bound, nor refuse
// below it.
func TestMaxEntriesUnderConcurrency(t *testing.T) {
	t.Parallel()
	const max, goroutines, each = 500, 32, 40
	s := memstore.New(&memstore.Config{Shards: 8, MaxEntries: max, SweepInterval: -1})
	defer s.Close()
	var ok, full atomic.Int32
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				_, err := s.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("g%d-%d", g, i))})
				switch {
				case err == nil:
					ok.Add(1)
				case errors.Is(err, memstore.ErrFull):
					full.Add(1)
				default:
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if ok.Load() != max || int(full.Load()) != goroutines*each-max || s.Len() != max {
		t.Fatalf("%d acquired, %d full, %d stored; want exactly %d stored", ok.Load(), full.Load(), s.Len(), max)
	}
}

func TestPurgeRejectsNegativeGrace(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	if _, err := s.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("", "live")}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Purge(context.Background(), -time.Hour, 10); err == nil {
		t.Fatal("Purge with a negative grace succeeded")
	}
	if s.Len() != 1 {
		t.Fatalf("Purge with a negative grace deleted a live record")
	}
}
