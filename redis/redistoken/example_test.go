package redistoken_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/redis/redistoken"
)

// Tokens in Redis (IDEM_TEST_REDIS, default redis://127.0.0.1:6379/0),
// under a unique prefix that is removed at the end. It needs the server, so
// it has no Output line and does not run under go test; TestExamples runs it
// against the test server and checks that it prints:
//
//	<nil>
//	onetime: token already used
func Example() {
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "example:" + hex.EncodeToString(b[:]) + ":"
	ctx := context.Background()
	defer func() {
		keys, _ := c.Keys(ctx, prefix+"*").Result()
		for _, k := range keys {
			c.Del(ctx, k)
		}
	}()

	store, err := redistoken.New(c, &redistoken.Config{Prefix: prefix})
	if err != nil {
		panic(err)
	}
	tokens, err := onetime.New(store, nil)
	if err != nil {
		panic(err)
	}
	tok, err := tokens.Issue(ctx, "form:checkout:user-42")
	if err != nil {
		panic(err)
	}
	fmt.Println(tokens.Consume(ctx, "form:checkout:user-42", tok))
	fmt.Println(tokens.Consume(ctx, "form:checkout:user-42", tok))
}
