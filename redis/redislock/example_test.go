package redislock_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/redislock"
)

// Take a lock, see a second holder refused, release it, and see the next
// holder's fence grow. It needs a Redis server (IDEM_TEST_REDIS, default
// redis://127.0.0.1:6379/0), so it has no Output line and does not run under
// go test; TestExamples runs it against the test server and checks that it
// prints:
//
//	second holder refused: true
//	released: true
//	fence grew: true
func Example() {
	ctx := context.Background()
	rdb, prefix, cleanup := exampleRedis()
	defer cleanup()

	locker, err := redislock.New(rdb, &redislock.Config{
		Prefix: prefix,
		TTL:    10 * time.Second,
		// Bound the wait: without it Acquire waits until ctx is done,
		// also while Redis refuses connections.
		WaitTimeout: 5 * time.Second,
	})
	if err != nil {
		panic(err)
	}
	lease, err := locker.Acquire(ctx, "stock:sku-7")
	if err != nil {
		panic(err)
	}
	// While we hold it, nobody else gets it.
	_, err = locker.TryAcquire(ctx, "stock:sku-7")
	fmt.Println("second holder refused:", errors.Is(err, lock.ErrNotAcquired))

	// Work under lease.Context(): it is cancelled if the lock is lost.
	// Hand lease.Fence() to your writes (lock.FencedTable).
	first := lease.Fence()
	fmt.Println("released:", lease.Release(ctx) == nil)

	again, err := locker.Acquire(ctx, "stock:sku-7")
	if err != nil {
		panic(err)
	}
	fmt.Println("fence grew:", again.Fence() > first)
	if err := again.Release(ctx); err != nil {
		panic(err)
	}
}

// A lease whose lock was taken over is told so: its context is cancelled
// with a cause that lock.IsLost recognises, and its Release deletes
// nothing. The cause is lock.ErrNotHeld when A's renewal finds B's lock,
// and lock.ErrExpired when it ran between the deletion and B's Acquire, or
// came later than A's TTL on a busy machine: check IsLost, not one of the
// two. The TTL of 2 s keeps B's lease alive through a busy machine's late
// renewals (at 150 ms, B's own lock once expired before its Release); A
// learns of its loss at its first renewal, a third of the TTL in. Like
// Example it needs Redis; TestExamples checks that it prints:
//
//	A told it lost the lock: true
//	A's release: redislock: release "report": lock: not held: another owner holds the lock
//	B's release: <nil>
func Example_lostLease() {
	ctx := context.Background()
	rdb, prefix, cleanup := exampleRedis()
	defer cleanup()
	locker, err := redislock.New(rdb, &redislock.Config{Prefix: prefix, TTL: 2 * time.Second, WaitTimeout: 5 * time.Second})
	if err != nil {
		panic(err)
	}

	a, err := locker.Acquire(ctx, "report")
	if err != nil {
		panic(err)
	}
	rdb.Del(ctx, prefix+"{report}") // as if A paused past its TTL
	b, err := locker.Acquire(ctx, "report")
	if err != nil {
		panic(err)
	}

	<-a.Context().Done()
	fmt.Println("A told it lost the lock:", lock.IsLost(context.Cause(a.Context())))
	fmt.Println("A's release:", a.Release(ctx))
	fmt.Println("B's release:", b.Release(ctx))
}

// exampleRedis connects to IDEM_TEST_REDIS (default redis://127.0.0.1:6379/0)
// and returns a key prefix of its own; cleanup deletes its keys.
func exampleRedis() (*redis.Client, string, func()) {
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	opt.ContextTimeoutEnabled = true // redislock refuses a client that ignores context deadlines
	rdb := redis.NewClient(opt)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemex_" + hex.EncodeToString(b[:]) + ":"
	return rdb, prefix, func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	}
}
