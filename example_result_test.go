package idem_test

import (
	"context"
	"errors"
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

// A request that carries its own key (AIP-155's request_id): the key comes
// from the payload, and the fingerprint covers the fields that define the
// operation, so a retry with a new trace id replays, and one with another
// amount is refused.
func ExampleKeyFromJSON() {
	store := memstore.New(nil)
	defer store.Close()
	transfer := func(body string) (string, error) {
		key, err := idem.KeyFromJSON("tenant-42", []byte(body), "/request_id")
		if err != nil {
			return "", err
		}
		fp, err := idem.FingerprintJSONPointers([]byte(body), "transfer", "/amount", "/to")
		if err != nil {
			return "", err
		}
		return idem.Do(context.Background(), store, key, &idem.Options{Fingerprint: fp}, func(ctx context.Context) (string, error) {
			return "transfer tr_1 sent", nil
		})
	}
	fmt.Println(transfer(`{"request_id":"rq-1","amount":100,"to":"acct_9","trace":"a1"}`))
	fmt.Println(transfer(`{"trace":"b2","to":"acct_9","amount":100,"request_id":"rq-1"}`))
	_, err := transfer(`{"request_id":"rq-1","amount":500,"to":"acct_9"}`)
	fmt.Println(errors.Is(err, idem.ErrMismatch))
	_, err = transfer(`{"amount":100,"to":"acct_9"}`)
	fmt.Println(errors.Is(err, idem.ErrKeyNotFound))
	// Output:
	// transfer tr_1 sent <nil>
	// transfer tr_1 sent <nil>
	// true
	// true
}
