package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/redisstore"
)

// A store on a master with one replica: every write that decides
// ownership or a result waits until the replica has it (WAIT, pipelined
// with the script), or fails as unavailable after WaitTimeout. The
// store's Check and Replication report the topology; without
// WaitReplicas, Check and Begin would refuse the replicated master with
// idem.ErrAsyncReplication. New does no I/O, so this example runs without
// a server.
func ExampleConfig_waitReplicas() {
	rdb := redis.NewClient(&redis.Options{
		Addr:                  "redis-master.internal:6379",
		ContextTimeoutEnabled: true,
		ReadTimeout:           3 * time.Second, // longer than WaitTimeout
	})
	defer rdb.Close()
	store, err := redisstore.New(rdb, &redisstore.Config{
		WaitReplicas: 1,
		WaitTimeout:  500 * time.Millisecond,
	})
	fmt.Println("store:", err)

	// At startup: Check fails on an asynchronous master, and reports.
	check := func(ctx context.Context) error {
		if err := store.Check(ctx); errors.Is(err, idem.ErrAsyncReplication) {
			return fmt.Errorf("set WaitReplicas, or AllowAsyncReplication: %w", err)
		} else if err != nil {
			return err
		}
		r, err := store.Replication(ctx) // e.g. "synchronous (…: role=master connected_slaves=1 … WaitReplicas=1)"
		if err == nil {
			fmt.Println("replication:", r)
		}
		return err
	}
	_ = check

	// A go-redis Ring cannot carry a script and its WAIT on one connection.
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "redis-a.internal:6379"}, ContextTimeoutEnabled: true})
	defer ring.Close()
	_, err = redisstore.New(ring, &redisstore.Config{WaitReplicas: 1})
	var ce *idem.ConfigError
	fmt.Println("ring:", errors.As(err, &ce), ce.Field)
	// Output:
	// store: <nil>
	// ring: true Config.WaitReplicas
}
