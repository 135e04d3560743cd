package idem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// Work with an effect that cannot be undone or deduplicated downstream
// runs in at-most-once mode: Do marks the claim started before calling fn.
// Here a first process claimed the key, marked it, and died (its lease runs
// out); the retry does not send the payout again, and learns that its
// outcome is unknown.
func ExampleOptions_atMostOnce() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()
	key := idem.MustKey("tenant-42", "payout-2026-12-01")

	// The first process: claims, marks, starts the transfer, and dies.
	c, _ := store.Begin(ctx, idem.BeginRequest{Key: key, Lease: 10 * time.Millisecond})
	_ = store.MarkStarted(ctx, c.Owner)
	time.Sleep(20 * time.Millisecond)

	sent := 0
	opts := &idem.Options{AtMostOnce: true}
	_, err := idem.Do(ctx, store, key, opts, func(ctx context.Context) (string, error) {
		sent++
		return "transfer-2", nil
	})
	fmt.Println(errors.Is(err, idem.ErrOutcomeUnknown), "sent again:", sent)

	// Every later call gets the same answer, until an operator resolves it.
	_, err = idem.Do(ctx, store, key, opts, func(ctx context.Context) (string, error) {
		sent++
		return "transfer-3", nil
	})
	fmt.Println(errors.Is(err, idem.ErrOutcomeUnknown), "sent again:", sent)
	// Output:
	// true sent again: 0
	// true sent again: 0
}

// What an operator's tool reads from a key held in a step (package
// step's HoldUnknown): the step, and the steps that finished before it.
func ExampleHeldStepOf() {
	result := idem.OutcomeUnknownStepResult(idem.HeldStep{Name: "charge", Finished: []string{"reserve"}})
	if h, ok := idem.HeldStepOf(result); ok {
		fmt.Printf("held in step %s after %v\n", h.Name, h.Finished)
	}
	fmt.Println(idem.IsOutcomeUnknownResult(result))
	// Output:
	// held in step charge after [reserve]
	// true
}
