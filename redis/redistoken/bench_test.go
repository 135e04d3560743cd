package redistoken_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redistoken"
)

// benchConns is the number of concurrent callers: GOMAXPROCS × parallelism
// goroutines, each with its own pooled connection, like redis-benchmark -c.
// benchcmp.sh runs redis-benchmark with the same number of clients.
const benchParallelism = 25

func benchClient(b *testing.B) (*redis.Client, string) {
	c, prefix := redistest.RedisClient(b)
	opt := c.Options()
	opt.PoolSize = 256
	opt.MinIdleConns = 64
	bc := redis.NewClient(opt)
	b.Cleanup(func() { bc.Close() })
	return bc, prefix
}

// issueMany issues n tokens with 32 workers.
func issueMany(b *testing.B, tokens *onetime.Tokens, scope string, n int) []string {
	out := make([]string, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				tok, err := tokens.Issue(context.Background(), scope)
				if err != nil {
					b.Error(err)
					return
				}
				out[i] = tok
			}
		}()
	}
	wg.Wait()
	return out
}

// BenchmarkConsume measures Tokens.Consume (one EVALSHA) of distinct fresh
// tokens, from benchParallelism×GOMAXPROCS goroutines.
func BenchmarkConsume(b *testing.B) {
	c, prefix := benchClient(b)
	// Short-lived: the benchmark's tokens leave Redis within a minute.
	s, _ := redistoken.New(c, &redistoken.Config{Prefix: prefix, Retain: time.Millisecond})
	tokens, _ := onetime.New(s, &onetime.Config{TTL: time.Minute})
	toks := issueMany(b, tokens, "bench", b.N)
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if err := tokens.Consume(ctx, "bench", toks[next.Add(1)-1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkIssue measures Tokens.Issue (crypto/rand, SHA-256, one EVALSHA).
func BenchmarkIssue(b *testing.B) {
	c, prefix := benchClient(b)
	// Short-lived: the benchmark's tokens leave Redis within a minute.
	s, _ := redistoken.New(c, &redistoken.Config{Prefix: prefix, Retain: time.Millisecond})
	tokens, _ := onetime.New(s, &onetime.Config{TTL: time.Minute})
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		for pb.Next() {
			if _, err := tokens.Issue(ctx, "bench"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkBaselineGETDEL is the floor in the same run: a raw GETDEL of
// existing keys through the same client at the same concurrency — what a
// token store built on GETDEL alone would cost (it could not tell used
// from unknown, nor spare a foreign scope).
func BenchmarkBaselineGETDEL(b *testing.B) {
	c, prefix := benchClient(b)
	ctx := context.Background()
	pipe := c.Pipeline()
	for i := range b.N {
		pipe.Set(ctx, prefix+"gd:"+strconv.Itoa(i), "x", 0)
		if i%1000 == 999 {
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		b.Fatal(err)
	}
	var next atomic.Int64
	b.SetParallelism(benchParallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.GetDel(ctx, prefix+"gd:"+strconv.FormatInt(next.Add(1)-1, 10)).Err(); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
