package memstore_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// BenchmarkBeginComplete measures a first claim plus its completion in a
// store at steady state: a fixed table of 64Ki keys whose 1ms retention has
// run out by the time the loop comes back to them, as in a service whose
// record count is bounded by rate × retention. Keys are built beforehand.
func BenchmarkBeginComplete(b *testing.B) {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	result := []byte(`{"status":"ok"}`)
	const pool = 1 << 16
	keys := make([]idem.Key, pool)
	for i := range keys {
		keys[i] = idem.MustKey("bench", "k"+strconv.Itoa(i))
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := keys[n.Add(1)&(pool-1)]
			c, err := s.Begin(ctx, idem.BeginRequest{Key: key, Lease: time.Millisecond, Retention: time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			if c.Outcome != idem.Acquired {
				continue // came back to a key within 1ms: another goroutine's
			}
			if err := s.Complete(ctx, c.Owner, result); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkBeginCompleteGrowing measures the same on a table that grows by
// one record per operation (millions), with key hashing in the loop: the
// cost of a flood of new keys before any expire.
func BenchmarkBeginCompleteGrowing(b *testing.B) {
	s := memstore.New(&memstore.Config{MaxEntries: 1 << 30, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	result := []byte(`{"status":"ok"}`)
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			key := idem.MustKey("bench", "k"+strconv.FormatInt(n.Add(1), 10))
			c, err := s.Begin(ctx, idem.BeginRequest{Key: key})
			if err != nil || c.Outcome != idem.Acquired {
				b.Fatal(c.Outcome, err)
			}
			if err := s.Complete(ctx, c.Owner, result); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkReplay measures answering a duplicate of a completed operation.
func BenchmarkReplay(b *testing.B) {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	keys := make([]idem.Key, 1024)
	for i := range keys {
		keys[i] = idem.MustKey("bench", "k"+strconv.Itoa(i))
		c, _ := s.Begin(ctx, idem.BeginRequest{Key: keys[i]})
		_ = s.Complete(ctx, c.Owner, []byte(`{"status":"ok"}`))
	}
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			c, err := s.Begin(ctx, idem.BeginRequest{Key: keys[n.Add(1)&1023]})
			if err != nil || c.Outcome != idem.Replay {
				b.Fatal(c.Outcome, err)
			}
		}
	})
}
