package memstore_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// TestResultsSurviveCompaction: results live in a per-shard arena that is
// compacted once most of it is freed (expired records purged, expired
// records taken over); every live record still replays its own result,
// small and large, byte for byte.
func TestResultsSurviveCompaction(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{Shards: 1, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	result := func(i int) []byte {
		n := 1000
		if i%10 == 0 {
			n = 9000 // a large one: stored on its own
		}
		return bytes.Repeat([]byte{byte('a' + i%26)}, n)
	}
	store := func(id string, i int, retention time.Duration) {
		t.Helper()
		c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", id), Lease: retention, Retention: retention})
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("Begin %s = %v, %v", id, c.Outcome, err)
		}
		if err := s.Complete(ctx, c.Owner, result(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 {
		store(fmt.Sprintf("live-%d", i), i, time.Hour)
	}
	for i := range 200 {
		store(fmt.Sprintf("short-%d", i), i, time.Millisecond)
	}
	time.Sleep(5 * time.Millisecond) // the short records expire
	// Half of them taken over as new claims (their results freed on the
	// way), the rest purged.
	for i := range 100 {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", fmt.Sprintf("short-%d", i)), Retention: time.Hour})
		if err != nil || c.Outcome != idem.Acquired {
			t.Fatalf("Begin of expired short-%d = %v, %v", i, c.Outcome, err)
		}
	}
	if n, err := s.Purge(ctx, 0, 1000); err != nil || n != 100 {
		t.Fatalf("Purge = %d, %v; want 100", n, err)
	}
	for i := range 40 {
		k := idem.MustKey("t", fmt.Sprintf("live-%d", i))
		c, err := s.Begin(ctx, idem.BeginRequest{Key: k})
		if err != nil || c.Outcome != idem.Replay || !bytes.Equal(c.Result, result(i)) {
			t.Fatalf("live-%d: %v, %v, result of %d bytes, want its own %d", i, c.Outcome, err, len(c.Result), len(result(i)))
		}
		rec, err := s.Get(ctx, k)
		if err != nil || !bytes.Equal(rec.Result, result(i)) {
			t.Fatalf("Get live-%d: %v, result of %d bytes", i, err, len(rec.Result))
		}
	}
	// A replay's Result is the store's own bytes (read-only), capped at
	// their length: a caller's append copies and never writes over the
	// next record's result.
	c, _ := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", "live-1")})
	if cap(c.Result) != len(c.Result) {
		t.Fatalf("replayed result has capacity %d past its %d bytes", cap(c.Result), len(c.Result))
	}
	_ = append(c.Result, 'Z')
	if c2, _ := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", "live-2")}); !bytes.Equal(c2.Result, result(2)) {
		t.Fatal("an append to a replayed result reached another record")
	}
}
