package redistoken_test

import (
	"context"
	"fmt"
	"log"

	"github.com/redis/rueidis"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/redis/redistoken"
)

// One-time tokens on a rueidis client. Needs a Redis server, so it has no
// Output line.
func ExampleNewRueidis() {
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	store, err := redistoken.NewRueidis(c, nil)
	if err != nil {
		log.Fatal(err)
	}
	tokens, err := onetime.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tok, err := tokens.Issue(ctx, "checkout:alice")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tokens.Consume(ctx, "checkout:alice", tok))
}
