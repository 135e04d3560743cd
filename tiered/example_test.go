package tiered_test

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/redisstore"
	"github.com/idemkit/idem/tiered"
)

// Redis answers the retries; the durable store (here an in-process
// memstore, in production sqlstore) judged the first request and never
// hears about the duplicates.
func Example() {
	ctx := context.Background()
	opt, _ := redis.ParseURL(testenv.Redis.DSN()) // redis://127.0.0.1:6379/0
	opt.ContextTimeoutEnabled = true              // let FastTimeout bound Redis calls
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	prefix := testenv.Name("idemex") + ":"
	defer func() {
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	}()

	fast, _ := redisstore.New(rdb, &redisstore.Config{Prefix: prefix})
	durable := memstore.New(nil)
	defer durable.Close()
	store, err := tiered.New(fast, durable, nil)
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
	// Output:
	// creating order 77
	// 77 <nil>
	// 77 <nil>
	// 77 <nil>
	// 77 <nil>
	// durable begins: 1 answered by Redis: 3
}
