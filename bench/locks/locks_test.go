// Package locks benchmarks acquire+release of idem's redislock against
// github.com/go-redsync/redsync/v4 and github.com/bsm/redislock on the same
// Redis, in the same run. It is a separate module so that the library never
// depends on its peers.
//
//	cd bench/locks && go test -run '^$' -bench . -count 5
//
// IDEM_TEST_REDIS selects the server (default redis://127.0.0.1:6379/0).
package locks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	bsm "github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/idemkit/idem/redis/redislock"
	"github.com/redis/go-redis/v9"
)

const ttl = 10 * time.Second

// impl is one library's acquire+release of an uncontended lock.
type impl struct {
	name string
	op   func(ctx context.Context, name string) error
}

func impls(b *testing.B, rdb *redis.Client, prefix string) []impl {
	idem, err := redislock.New(rdb, &redislock.Config{Prefix: prefix + "idem:", TTL: ttl})
	if err != nil {
		b.Fatal(err)
	}
	rs := redsync.New(goredis.NewPool(rdb))
	bl := bsm.New(rdb)
	return []impl{
		{"raw-setnx-del", func(ctx context.Context, name string) error { // the floor: two round trips, no safety
			key := prefix + "raw:" + name
			if err := rdb.SetNX(ctx, key, "x", ttl).Err(); err != nil {
				return err
			}
			return rdb.Del(ctx, key).Err()
		}},
		{"idem", func(ctx context.Context, name string) error {
			ls, err := idem.Acquire(ctx, name)
			if err != nil {
				return err
			}
			return ls.Release(ctx)
		}},
		{"redsync", func(ctx context.Context, name string) error {
			m := rs.NewMutex(prefix+"redsync:"+name, redsync.WithExpiry(ttl))
			if err := m.LockContext(ctx); err != nil {
				return err
			}
			_, err := m.UnlockContext(ctx)
			return err
		}},
		{"bsm", func(ctx context.Context, name string) error {
			lk, err := bl.Obtain(ctx, prefix+"bsm:"+name, ttl, nil)
			if err != nil {
				return err
			}
			return lk.Release(ctx)
		}},
	}
}

func BenchmarkAcquireRelease(b *testing.B) {
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // redislock refuses a client that ignores context deadlines
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Ping(ctx).Err(); err != nil {
		b.Fatalf("redis at %s: %v", opt.Addr, err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "idembench_" + hex.EncodeToString(rnd[:]) + ":"
	var g atomic.Int64
	for _, im := range impls(b, rdb, prefix) {
		b.Run(im.name+"/serial", func(b *testing.B) {
			for b.Loop() {
				if err := im.op(ctx, "serial"); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(im.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				name := "p" + strconv.FormatInt(g.Add(1), 10) // one lock per goroutine: uncontended
				for pb.Next() {
					if err := im.op(ctx, name); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
	// Fence counters are the only keys left behind.
	keys, _ := rdb.Keys(ctx, prefix+"*").Result()
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}

// BenchmarkInterleaved runs the libraries in turn, one operation each per
// iteration (rotating the order), timing each operation. On a shared,
// loaded machine, load then hits all of them alike, and the ratios mean more
// than separate sub-benchmarks that ran at different moments. Reported as
// <lib>-ns/op metrics (b.N counts rounds, not operations).
func BenchmarkInterleaved(b *testing.B) {
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		b.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true // redislock refuses a client that ignores context deadlines
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	ctx := context.Background()
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	prefix := "idembench_" + hex.EncodeToString(rnd[:]) + ":"
	ims := impls(b, rdb, prefix)
	report := func(b *testing.B, total []atomic.Int64, ops int64) {
		for i, im := range ims {
			b.ReportMetric(float64(total[i].Load())/float64(ops), im.name+"-ns/op")
		}
		b.ReportMetric(0, "ns/op")
	}
	b.Run("serial", func(b *testing.B) {
		total := make([]atomic.Int64, len(ims))
		n := int64(0)
		for b.Loop() {
			for j := range ims {
				i := (j + int(n)) % len(ims)
				t0 := time.Now()
				if err := ims[i].op(ctx, "serial"); err != nil {
					b.Fatal(err)
				}
				total[i].Add(int64(time.Since(t0)))
			}
			n++
		}
		report(b, total, n)
	})
	var g atomic.Int64
	b.Run("parallel", func(b *testing.B) {
		total := make([]atomic.Int64, len(ims))
		var rounds atomic.Int64
		b.RunParallel(func(pb *testing.PB) {
			name := "ip" + strconv.FormatInt(g.Add(1), 10)
			n := 0
			for pb.Next() {
				for j := range ims {
					i := (j + n) % len(ims)
					t0 := time.Now()
					if err := ims[i].op(ctx, name); err != nil {
						b.Error(err)
						return
					}
					total[i].Add(int64(time.Since(t0)))
				}
				n++
				rounds.Add(1)
			}
		})
		report(b, total, rounds.Load())
	})
	keys, _ := rdb.Keys(ctx, prefix+"*").Result()
	if len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
