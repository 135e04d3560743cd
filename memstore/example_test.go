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

// A log line carries the first 16 hex digits of a record's digest; an
// operator finds the record from them, reading at most two digests (two
// tell one match from an ambiguous prefix).
func ExampleStore_DigestsWithPrefix() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()

	key := idem.MustKey("tenant-1", "order-7")
	c, _ := store.Begin(ctx, idem.BeginRequest{Key: key})
	_ = store.Complete(ctx, c.Owner, []byte("ok"))

	fromLog := key.Digest().String()[:16]
	found, _ := store.DigestsWithPrefix(ctx, fromLog, 2)
	rec, _ := idem.Lookup(ctx, store, found[0])
	fmt.Println(len(found), rec.State)
	// Output:
	// 1 completed
}
