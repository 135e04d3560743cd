package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/redisstore"
)

// exampleURL is IDEM_TEST_REDIS, or redis://127.0.0.1:6379/0.
func exampleURL() string {
	if url := os.Getenv("IDEM_TEST_REDIS"); url != "" {
		return url
	}
	return "redis://127.0.0.1:6379/0"
}

// exampleClient connects to IDEM_TEST_REDIS (default
// redis://127.0.0.1:6379/0) and returns a prefix of its own and a cleanup
// that deletes every key under it.
func exampleClient() (*redis.Client, string, func()) {
	opt, err := redis.ParseURL(exampleURL())
	if err != nil {
		panic(err)
	}
	opt.ContextTimeoutEnabled = true // redisstore.New refuses a client without it
	c := redis.NewClient(opt)
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemex_" + hex.EncodeToString(b[:]) + ":"
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
// It needs a Redis server, so it has no Output line and does not run under
// go test; TestExamples runs it against the test server and checks that it
// prints:
//
//	charging the card
//	ch_1001 <nil>
//	ch_1001 <nil>
//	ch_1001 <nil>
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
}

// The store's decisions, step by step. Like Example it needs Redis;
// TestExamples checks that it prints:
//
//	first: acquired
//	while running: in_flight
//	after completion: replay {"order":7}
//	other request, same key: mismatch
func ExampleStore_Begin() {
	rdb, prefix, cleanup := exampleClient()
	defer cleanup()
	ctx := context.Background()
	store, err := redisstore.New(rdb, &redisstore.Config{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	begin := func(req idem.BeginRequest) idem.Claim {
		c, err := store.Begin(ctx, req)
		if err != nil {
			panic(err) // the store is unreachable: answer 503, never run unprotected
		}
		return c
	}

	req := idem.BeginRequest{Key: idem.MustKey("tenant", "order-7"), Fingerprint: idem.FingerprintOf([]byte("body"))}
	first := begin(req)
	fmt.Println("first:", first.Outcome)
	fmt.Println("while running:", begin(req).Outcome)

	if err := store.Complete(ctx, first.Owner, []byte(`{"order":7}`)); err != nil {
		panic(err)
	}
	again := begin(req)
	fmt.Println("after completion:", again.Outcome, string(again.Result))

	other := req
	other.Fingerprint = idem.FingerprintOf([]byte("another body"))
	fmt.Println("other request, same key:", begin(other).Outcome)
}
