package redistoken_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/redistoken"
)

// Tokens in Redis (the shared test server on 127.0.0.1:6379, under a
// unique prefix that is removed at the end).
func Example() {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
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
	tokens, _ := onetime.New(store, nil)
	tok, err := tokens.Issue(ctx, "form:checkout:user-42")
	if err != nil {
		panic(err)
	}
	fmt.Println(tokens.Consume(ctx, "form:checkout:user-42", tok))
	fmt.Println(tokens.Consume(ctx, "form:checkout:user-42", tok))
	// Output:
	// <nil>
	// onetime: token already used
}
