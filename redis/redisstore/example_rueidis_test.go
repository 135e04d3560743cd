package redisstore_test

import (
	"context"
	"fmt"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/redis/redisstore"
)

// The store on a rueidis client: concurrent callers share pipelined
// connections. It needs a Redis server, so it has no Output line and does
// not run under go test; TestExamples runs it against the test server and
// checks that it prints:
//
//	sending the email
//	sent <nil>
//	sent <nil>
func ExampleNewRueidis() {
	opt, err := rueidis.ParseURL(exampleURL()) // IDEM_TEST_REDIS, or redis://127.0.0.1:6379/0
	if err != nil {
		panic(err)
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	_, prefix, cleanup := exampleClient() // a key prefix of its own, deleted at the end
	defer cleanup()

	store, err := redisstore.NewRueidis(c, &redisstore.Config{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if err := store.Check(ctx); err != nil { // refuses a server that may evict records
		panic(err)
	}
	key := idem.MustKey("newsletter", "welcome-user-7")
	for range 2 {
		v, err := idem.Do(ctx, store, key, nil, func(context.Context) (string, error) {
			fmt.Println("sending the email")
			return "sent", nil
		})
		fmt.Println(v, err)
	}
}
