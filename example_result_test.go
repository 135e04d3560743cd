package idem_test

import (
	"context"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// DoResult says whether the value was produced now or replayed, for an
// audit log or an API that marks replays.
func ExampleDoResult() {
	store := memstore.New(nil)
	defer store.Close()
	key := idem.MustKey("tenant-42", "refund-7")
	for range 2 {
		r, err := idem.DoResult(context.Background(), store, key, nil, func(ctx context.Context) (string, error) {
			return "refund rf_1 issued", nil
		})
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s (replayed: %v)\n", r.Value, r.Replayed)
	}
	// Output:
	// refund rf_1 issued (replayed: false)
	// refund rf_1 issued (replayed: true)
}

// A fingerprint of the fields that define the operation: a retry that
// changes only its timestamp is the same request.
func ExampleFingerprintJSONPointers() {
	a, _ := idem.FingerprintJSONPointers([]byte(`{"amount":100,"to":"acct_9","sent_at":"09:00:01"}`), "transfer", "/amount", "/to")
	b, _ := idem.FingerprintJSONPointers([]byte(`{"to":"acct_9","amount":100,"sent_at":"09:00:07"}`), "transfer", "/amount", "/to")
	fmt.Println(a == b)
	// Output: true
}
