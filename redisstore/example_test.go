package redisstore_test

import (
	"context"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redisstore"
)

// exampleClient connects to the test Redis (127.0.0.1:6379 unless
// IDEM_TEST_REDIS says otherwise) and returns a prefix of its own and a
// cleanup that deletes every key under it.
func exampleClient() (*redis.Client, string, func()) {
	opt, err := redis.ParseURL(testenv.Redis.DSN())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	opt.ContextTimeoutEnabled = true // redisstore.New refuses a client without it
	c := redis.NewClient(opt)
	prefix := testenv.Name("idemex") + ":"
	return c, prefix, func() {
		ctx := context.Background()
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		c.Close()
	}
}

// A payment handler that runs once per key, however often it is retried.
func Example() {
	rdb, prefix, cleanup := exampleClient()
	defer cleanup()
	ctx := context.Background()

	store, err := redisstore.New(rdb, &redisstore.Config{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	// At startup: refuse a server that may evict records.
	if err := store.Check(ctx); err != nil {
		panic(err)
	}

	key := idem.MustKey("merchant-42", "charge-1001")
	charge := func(ctx context.Context) (string, error) {
		fmt.Println("charging the card")
		return "ch_1001", nil
	}
	for i := 0; i < 3; i++ { // the client retries twice
		id, err := idem.Do(ctx, store, key, nil, charge)
		fmt.Println(id, err)
	}
	// Output:
	// charging the card
	// ch_1001 <nil>
	// ch_1001 <nil>
	// ch_1001 <nil>
}

// The store's decisions, step by step.
func ExampleStore_Begin() {
	rdb, prefix, cleanup := exampleClient()
	defer cleanup()
	ctx := context.Background()
	store, _ := redisstore.New(rdb, &redisstore.Config{Prefix: prefix})

	req := idem.BeginRequest{Key: idem.MustKey("tenant", "order-7"), Fingerprint: idem.FingerprintOf([]byte("body"))}
	first, _ := store.Begin(ctx, req)
	fmt.Println("first:", first.Outcome)
	dup, _ := store.Begin(ctx, req)
	fmt.Println("while running:", dup.Outcome)

	_ = store.Complete(ctx, first.Owner, []byte(`{"order":7}`))
	again, _ := store.Begin(ctx, req)
	fmt.Println("after completion:", again.Outcome, string(again.Result))

	other := req
	other.Fingerprint = idem.FingerprintOf([]byte("another body"))
	m, _ := store.Begin(ctx, other)
	fmt.Println("other request, same key:", m.Outcome)
	// Output:
	// first: acquired
	// while running: in_flight
	// after completion: replay {"order":7}
	// other request, same key: mismatch
}
