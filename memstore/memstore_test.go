package memstore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	idemtest.RunStore(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			s := memstore.New(&memstore.Config{SweepInterval: -1}) // Purge is under test; no sweeper racing it
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}

func TestBoundedUnderUniqueKeyFlood(t *testing.T) {
	t.Parallel()
	const max = 1024
	s := memstore.New(&memstore.Config{Shards: 4, MaxEntries: max, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	full := 0
	for i := 0; i < 10*max; i++ {
		_, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("flood-%d", i))})
		if errors.Is(err, memstore.ErrFull) {
			if !idem.IsUnavailable(err) {
				t.Fatalf("ErrFull does not match ErrUnavailable")
			}
			full++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if s.Len() > max {
		t.Fatalf("store holds %d records, bound is %d", s.Len(), max)
	}
	if full == 0 {
		t.Fatalf("a flood of %d unique live keys never hit the bound", 10*max)
	}
}

func TestFullShardReclaimsExpired(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{Shards: 1, MaxEntries: 8, SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	for i := 0; i < 8; i++ {
		if _, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("e-%d", i)), Lease: time.Millisecond, Retention: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	// The shard is full of expired records: a new key sweeps them and fits.
	c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", "new")})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("Begin on full shard of expired records = %v, %v", c.Outcome, err)
	}
	if s.Len() != 1 {
		t.Fatalf("Len = %d after sweep, want 1", s.Len())
	}
}

func TestSweeperDeletesExpired(t *testing.T) {
	t.Parallel()
	s := memstore.New(&memstore.Config{SweepInterval: 10 * time.Millisecond})
	defer s.Close()
	for i := 0; i < 100; i++ {
		if _, err := s.Begin(context.Background(), idem.BeginRequest{Key: idem.MustKey("", fmt.Sprintf("s-%d", i)), Lease: time.Millisecond, Retention: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("sweeper left %d expired records", s.Len())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCloseTwice(t *testing.T) {
	s := memstore.New(nil)
	s.Close()
	s.Close()
}

func TestStepConformance(t *testing.T) {
	idemtest.RunSteps(t, idemtest.Harness{
		New: func(t *testing.T) idem.Store {
			s := memstore.New(&memstore.Config{SweepInterval: -1})
			t.Cleanup(func() { s.Close() })
			return s
		},
	})
}
