package redislock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/redis/redislock"
)

// A Locker on a rueidis client: concurrent Acquire calls share pipelined
// connections. Needs a Redis server, so it has no Output line.
func ExampleNewRueidis() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	locker, err := redislock.NewRueidis(c, &redislock.Config{TTL: 10 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("fence", lease.Fence())
}
