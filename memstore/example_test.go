package memstore_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

func ExampleNew() {
	store := memstore.New(&memstore.Config{MaxEntries: 100_000})
	defer store.Close()
	ctx := context.Background()

	req := idem.BeginRequest{Key: idem.MustKey("tenant-1", "req-1")}
	first, _ := store.Begin(ctx, req)
	fmt.Println(first.Outcome)
	_ = store.Complete(ctx, first.Owner, []byte("ok"))

	again, _ := store.Begin(ctx, req)
	fmt.Println(again.Outcome, string(again.Result))
	// Output:
	// acquired
	// replay ok
}
