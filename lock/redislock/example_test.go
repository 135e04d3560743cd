package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/redislock"
	"github.com/redis/go-redis/v9"
)

func Example() {
	ctx := context.Background()
	rdb, prefix, cleanup := exampleRedis()
	defer cleanup()

	locker, err := redislock.New(rdb, &redislock.Config{Prefix: prefix, TTL: 10 * time.Second})
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
	defer again.Release(ctx)
	fmt.Println("fence grew:", again.Fence() > first)
	// Output:
	// second holder refused: true
	// released: true
	// fence grew: true
}

// A lease whose lock was taken over is told so: its context is cancelled
// with the reason, and its Release deletes nothing.
func Example_lostLease() {
	ctx := context.Background()
	rdb, prefix, cleanup := exampleRedis()
	defer cleanup()
	locker, _ := redislock.New(rdb, &redislock.Config{Prefix: prefix, TTL: 150 * time.Millisecond})

	a, _ := locker.Acquire(ctx, "report")
	rdb.Del(ctx, prefix+"{report}") // as if A paused past its TTL
	b, _ := locker.Acquire(ctx, "report")

	<-a.Context().Done()
	fmt.Println("A told it is not the holder:", errors.Is(context.Cause(a.Context()), lock.ErrNotHeld))
	fmt.Println("A's release:", a.Release(ctx))
	fmt.Println("B's release:", b.Release(ctx))
	// Output:
	// A told it is not the holder: true
	// A's release: redislock: release "report": lock: not held: another owner holds the lock
	// B's release: <nil>
}

// exampleRedis connects to the test Redis (IDEM_TEST_REDIS) and returns a
// key prefix of its own; cleanup deletes its keys.
func exampleRedis() (*redis.Client, string, func()) {
	opt, err := redis.ParseURL(testenv.Redis.DSN())
	if err != nil {
		panic(err)
	}
	opt.ContextTimeoutEnabled = true // redislock refuses a client that ignores context deadlines
	rdb := redis.NewClient(opt)
	prefix := testenv.Name("idemex") + ":"
	return rdb, prefix, func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	}
}
