package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

func ExampleDo() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()

	type receipt struct {
		ChargeID string
		Amount   int
	}
	charges := 0
	charge := func(ctx context.Context) (receipt, error) {
		charges++ // the side effect that must happen once
		return receipt{ChargeID: fmt.Sprintf("ch_%d", charges), Amount: 4200}, nil
	}

	// The client retries with the same key: the charge runs once.
	key := idem.MustKey("tenant-42", "order-1001-payment")
	for attempt := 1; attempt <= 3; attempt++ {
		r, err := idem.Do(ctx, store, key, nil, charge)
		if err != nil {
			fmt.Println("error:", err)
			return
		}
		fmt.Printf("attempt %d: %s %d\n", attempt, r.ChargeID, r.Amount)
	}
	fmt.Println("charges made:", charges)
	// Output:
	// attempt 1: ch_1 4200
	// attempt 2: ch_1 4200
	// attempt 3: ch_1 4200
	// charges made: 1
}

func ExampleDo_mismatch() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()
	key := idem.MustKey("tenant-42", "transfer-7")

	send := func(amount int) error {
		opts := &idem.Options{Fingerprint: idem.FingerprintOf([]byte(fmt.Sprint(amount)))}
		_, err := idem.Do(ctx, store, key, opts, func(context.Context) (int, error) { return amount, nil })
		return err
	}
	fmt.Println(send(100))
	fmt.Println(errors.Is(send(999), idem.ErrMismatch))
	// Output:
	// <nil>
	// true
}

func ExampleNewKey() {
	_, err := idem.NewKey("tenant-42", "has spaces")
	fmt.Println(err)
	fmt.Println(errors.Is(err, idem.ErrInvalidKey))
	// Output:
	// idem: invalid key: key has a byte 0x20 at offset 3; only visible ASCII (0x21-0x7e) is allowed
	// true
}

func ExampleCanonicalJSON() {
	a, _ := idem.CanonicalJSON([]byte(`{"b":[1,2], "a":1}`))
	fmt.Println(string(a))
	// Output: {"a":1,"b":[1,2]}
}

func ExampleFenceFromContext() {
	store := memstore.New(nil)
	defer store.Close()
	_, _ = idem.Do(context.Background(), store, idem.MustKey("", "job-1"), nil, func(ctx context.Context) (bool, error) {
		fence := idem.FenceFromContext(ctx)
		// UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence < $2
		fmt.Println("fence > 0:", fence > 0)
		return true, nil
	})
	// Output: fence > 0: true
}
