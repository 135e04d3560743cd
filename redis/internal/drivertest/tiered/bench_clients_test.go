package tiered_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/tiered"
)

// The duplicates a tiered store answers from Redis alone, replays and
// in-flight answers, at 64 concurrent callers, on each Redis client in the
// same run: go-redis (a pool of connections) and rueidis (automatic
// pipelining onto shared connections). Sub-benchmarks alternate under
// -count, so that the two clients' runs pair up in time.

const callers = 64

// tieredOn returns a tiered store whose fast store is a redisstore on the
// shared Redis through a client of kind, in front of PostgreSQL.
func tieredOn(b *testing.B, kind string) *tiered.Store {
	d, _, _ := durableOnPostgres(b)
	_, prefix := redistest.RedisClient(b)
	fast := redistest.RedisStoreOn(b, kind, sharedClient(b), &redisstore.Config{Prefix: prefix})
	return newTiered(b, fast, d, nil)
}

// benchDuplicates runs Begin of req from 64 goroutines (on any GOMAXPROCS)
// and checks every answer is want, answered by Redis: the durable store
// sees no Begin.
func benchDuplicates(b *testing.B, prepare func(b *testing.B, s *tiered.Store) idem.BeginRequest, want idem.Outcome) {
	for _, kind := range []string{testenv.GoRedisKind, testenv.RueidisKind} {
		b.Run(kind, func(b *testing.B) {
			s := tieredOn(b, kind)
			req := prepare(b, s)
			before := s.Stats().DurableBegins
			ctx := context.Background()
			b.ReportAllocs()
			procs := runtime.GOMAXPROCS(0)
			b.SetParallelism((callers + procs - 1) / procs) // RunParallel starts parallelism × GOMAXPROCS goroutines
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if c, err := s.Begin(ctx, req); err != nil || c.Outcome != want {
						b.Errorf("Begin = %v, %v; want %v", c.Outcome, err, want)
						return
					}
				}
			})
			b.StopTimer()
			if n := s.Stats().DurableBegins - before; n != 0 {
				b.Errorf("%d duplicates reached the durable store", n)
			}
		})
	}
}

// BenchmarkTieredReplay: a completed key, asked again and again.
func BenchmarkTieredReplay(b *testing.B) {
	benchDuplicates(b, func(b *testing.B, s *tiered.Store) idem.BeginRequest { return completed(b, s) }, idem.Replay)
}

// BenchmarkTieredInFlight: a key whose first request is still running
// (claimed, lease an hour), asked by its retries.
func BenchmarkTieredInFlight(b *testing.B) {
	benchDuplicates(b, func(b *testing.B, s *tiered.Store) idem.BeginRequest {
		req := idem.BeginRequest{Key: idem.MustKey("bench", testenv.Name("f")), Fingerprint: idem.FingerprintOf([]byte("x")), Lease: time.Hour}
		if c, err := s.Begin(context.Background(), req); err != nil || c.Outcome != idem.Acquired {
			b.Fatalf("first Begin = %v, %v", c.Outcome, err)
		}
		return req
	}, idem.InFlight)
}
