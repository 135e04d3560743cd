package redislock

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/redis/internal/redistest"
)

// Acquire+release of an uncontended lock against the raw floor: SET NX PX and
// DEL, the two round trips any lock needs. Peer libraries are compared in the
// bench/locks module. Reproduce:
//
//	go test -run '^$' -bench . -count 5 ./redis/redislock/
func BenchmarkAcquireRelease(b *testing.B) {
	shared, prefix := redistest.RedisClient(b)
	opt := *shared.Options()
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(&opt)
	defer rdb.Close()
	l, err := New(rdb, &Config{Prefix: prefix + "lock:", TTL: 10 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.Run("raw-setnx-del/serial", func(b *testing.B) {
		key := prefix + "raw"
		for b.Loop() {
			if ok, err := rdb.SetNX(ctx, key, "x", 10*time.Second).Result(); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := rdb.Del(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("idem/serial", func(b *testing.B) {
		for b.Loop() {
			ls, err := l.Acquire(ctx, "bench")
			if err != nil {
				b.Fatal(err)
			}
			if err := ls.Release(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	var g atomic.Int64
	b.Run("raw-setnx-del/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			key := prefix + "raw" + strconv.FormatInt(g.Add(1), 10)
			for pb.Next() {
				if ok, err := rdb.SetNX(ctx, key, "x", 10*time.Second).Result(); err != nil || !ok {
					b.Error(ok, err)
					return
				}
				if err := rdb.Del(ctx, key).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("idem/parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			name := "bench" + strconv.FormatInt(g.Add(1), 10)
			for pb.Next() {
				ls, err := l.Acquire(ctx, name)
				if err != nil {
					b.Error(err)
					return
				}
				if err := ls.Release(ctx); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
