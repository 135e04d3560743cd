package tiered_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/tiered"
)

// A fast store in front of a durable one. In production the fast store is
// redisstore and the durable one sqlstore; two memory stores stand in for
// them here so that the example runs: the first call is judged by the
// durable store and executes, the retry is answered from the fast one.
func ExampleNew() {
	fast, durable := memstore.New(nil), memstore.New(nil)
	defer fast.Close()
	defer durable.Close()
	store, err := tiered.New(fast, durable, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	key := idem.MustKey("tenant-1", "charge-7")
	charges := 0
	charge := func(ctx context.Context) (string, error) {
		charges++
		return fmt.Sprintf("charge #%d", charges), nil
	}
	for range 2 { // the client retries
		res, err := idem.Do(ctx, store, key, nil, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res)
	}
	fmt.Println("executed", charges, "time(s)")
	// Output:
	// charge #1
	// charge #1
	// executed 1 time(s)
}
