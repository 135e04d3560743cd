package redisstore_test

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// benchParallelism × GOMAXPROCS goroutines run the parallel benchmarks;
// bench/redisstore/run.sh gives redis-benchmark the same number of
// connections (16 on a 2-core machine).
const benchParallelism = 8

// benchResult is the stored result size, the same in run.sh.
var benchResult = make([]byte, 64)

func benchStore(b *testing.B) (*redisstore.Store, *redis.Client) {
	s, c, _ := newStore(b, nil)
	return s, c
}

func benchKeys(n int) []idem.Key {
	keys := make([]idem.Key, n)
	prefix := testenv.Name("b")
	for i := range keys {
		keys[i] = idem.MustKey("bench", prefix+"-"+itoa(i))
	}
	return keys
}

func itoa(i int) string {
	var b [20]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		i /= 10
		if i == 0 {
			return string(b[n:])
		}
	}
}

var benchReq = idem.BeginRequest{Lease: 30 * time.Second, Retention: time.Minute}

// BenchmarkAcquire: Begin on a new key (one EVALSHA that writes).
func BenchmarkAcquire(b *testing.B) {
	s, _ := benchStore(b)
	keys := benchKeys(b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := benchReq
		req.Key = keys[i]
		if c, err := s.Begin(ctx, req); err != nil || c.Outcome != idem.Acquired {
			b.Fatal(c.Outcome, err)
		}
	}
}

func BenchmarkAcquireParallel(b *testing.B) {
	s, _ := benchStore(b)
	keys := benchKeys(b.N)
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := benchReq
			req.Key = keys[next.Add(1)-1]
			if c, err := s.Begin(ctx, req); err != nil || c.Outcome != idem.Acquired {
				b.Error(c.Outcome, err)
				return
			}
		}
	})
}

// BenchmarkBeginComplete: a first request's whole life, two round trips.
func BenchmarkBeginComplete(b *testing.B) {
	s, _ := benchStore(b)
	keys := benchKeys(b.N)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := benchReq
		req.Key = keys[i]
		c, err := s.Begin(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, c.Owner, benchResult); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMarkCost: a first request with and without the at-most-once
// mark (MarkStarted, one more script, between Begin and Complete). The
// two sub-benchmarks alternate under -count, so each "with" run has a
// "without" run next to it in time: compare them pairwise.
func BenchmarkMarkCost(b *testing.B) {
	for _, mark := range []bool{false, true} {
		name := "without"
		if mark {
			name = "with"
		}
		b.Run(name, func(b *testing.B) {
			s, _ := benchStore(b)
			keys := benchKeys(b.N)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				req := benchReq
				req.Key = keys[i]
				c, err := s.Begin(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if mark {
					if err := s.MarkStarted(ctx, c.Owner); err != nil {
						b.Fatal(err)
					}
				}
				if err := s.Complete(ctx, c.Owner, benchResult); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkBeginCompleteParallel(b *testing.B) {
	s, _ := benchStore(b)
	keys := benchKeys(b.N)
	ctx := context.Background()
	var next atomic.Int64
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req := benchReq
			req.Key = keys[next.Add(1)-1]
			c, err := s.Begin(ctx, req)
			if err == nil {
				err = s.Complete(ctx, c.Owner, benchResult)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func replayReq(b *testing.B, s *redisstore.Store) idem.BeginRequest {
	req := benchReq
	req.Key = benchKeys(1)[0]
	c, err := s.Begin(context.Background(), req)
	if err == nil {
		err = s.Complete(context.Background(), c.Owner, benchResult)
	}
	if err != nil {
		b.Fatal(err)
	}
	return req
}

// BenchmarkReplay: Begin on a completed key (one EVALSHA that only reads).
func BenchmarkReplay(b *testing.B) {
	s, _ := benchStore(b)
	req := replayReq(b, s)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if c, err := s.Begin(ctx, req); err != nil || c.Outcome != idem.Replay {
			b.Fatal(c.Outcome, err)
		}
	}
}

func BenchmarkReplayParallel(b *testing.B) {
	s, _ := benchStore(b)
	req := replayReq(b, s)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if c, err := s.Begin(ctx, req); err != nil || c.Outcome != idem.Replay {
				b.Error(c.Outcome, err)
				return
			}
		}
	})
}

// BenchmarkRawPing is the floor: one go-redis round trip that does nothing.
func BenchmarkRawPing(b *testing.B) {
	_, c := benchStore(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.Ping(ctx).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawPingParallel(b *testing.B) {
	_, c := benchStore(b)
	ctx := context.Background()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkRawEvalShaReplay is the driver baseline for BenchmarkReplay: the
// same script and arguments through go-redis's EvalSha directly, without
// redisstore's key building and reply decoding.
func BenchmarkRawEvalShaReplay(b *testing.B) {
	s, c := benchStore(b)
	key, args := rawReplayArgs(b, s, c)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := c.EvalSha(ctx, rawSHA, key, args...).Err(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRawEvalShaReplayParallel(b *testing.B) {
	s, c := benchStore(b)
	key, args := rawReplayArgs(b, s, c)
	ctx := context.Background()
	b.ReportAllocs()
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.EvalSha(ctx, rawSHA, key, args...).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

var rawSHA string

func rawReplayArgs(b *testing.B, s *redisstore.Store, c *redis.Client) ([]string, []any) {
	req := replayReq(b, s)
	src, err := os.ReadFile("lua/begin.lua")
	if err != nil {
		b.Fatal(err)
	}
	if rawSHA, err = c.ScriptLoad(context.Background(), string(src)).Result(); err != nil {
		b.Fatal(err)
	}
	tok := idem.NewToken()
	return []string{s.Key(req.Key)}, []any{req.Fingerprint[:], tok[:], benchReq.Lease.Microseconds(), benchReq.Retention.Microseconds()}
}
