package tiered_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/tiered"
)

// Redis answers the retries; the durable store (here an in-process
// memstore, in production sqlstore) judged the first request and never
// hears about the duplicates.
//
// It needs a Redis server (IDEM_TEST_REDIS, default
// redis://127.0.0.1:6379/0), so it has no Output line and does not run under
// go test; TestExamples runs it against the test server and checks that it
// prints:
//
//	creating order 77
//	77 <nil>
//	77 <nil>
//	77 <nil>
//	77 <nil>
//	durable begins: 1 answered by Redis: 3
func Example() {
	ctx := context.Background()
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	opt.ContextTimeoutEnabled = true // let FastTimeout bound Redis calls
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idemex_" + hex.EncodeToString(b[:]) + ":"
	defer func() {
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}()

	fast, err := redisstore.New(rdb, &redisstore.Config{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	durable := memstore.New(nil)
	defer durable.Close()
	// FastTimeout bounds each Redis call (50ms by default); a call over it
	// falls through to the durable store. This example is also run by a
	// test on a busy machine, where 50ms is not always enough.
	store, err := tiered.New(fast, durable, &tiered.Config{FastTimeout: time.Second})
	if err != nil {
		panic(err)
	}

	key := idem.MustKey("shop-9", "order-77")
	for i := 0; i < 4; i++ {
		n, err := idem.Do(ctx, store, key, nil, func(context.Context) (int, error) {
			fmt.Println("creating order 77")
			return 77, nil
		})
		fmt.Println(n, err)
	}
	st := store.Stats()
	fmt.Println("durable begins:", st.DurableBegins, "answered by Redis:", st.FastAnswers)
}
