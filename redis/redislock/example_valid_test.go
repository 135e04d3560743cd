package redislock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/redislock"
	"github.com/redis/go-redis/v9"
)

// A client for redislock must honour context deadlines
// (ContextTimeoutEnabled); New refuses one that does not. Inside lock.Do,
// lock.Valid(ctx) tells a holder that was paused past its lease, without a
// round trip, before it acts; the fence makes the database refuse its write
// if the pause falls after the check. Needs a Redis server: compile-only.
func ExampleNew_contextTimeouts() {
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	locker, err := redislock.New(rdb, &redislock.Config{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err) // a *idem.ConfigError (Field "client") without ContextTimeoutEnabled
	}
	err = lock.Do(context.Background(), locker, "refund:42", func(ctx context.Context, fence lock.Fence) error {
		// … prepare the refund, which may take a while …
		if err := lock.Valid(ctx); err != nil {
			return err // the lease has run out: another holder may be at work
		}
		return sendRefund(ctx, 42, fence) // a write conditional on the fence
	})
	if lock.IsLost(err) || errors.Is(err, lock.ErrStaleFence) {
		log.Print("lost the lock on the way; nothing was written twice")
	}
}

func sendRefund(ctx context.Context, id int, fence lock.Fence) error { return nil }
