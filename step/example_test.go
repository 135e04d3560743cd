package step_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/step"
)

// An operation of three steps fails in its second step the first time it
// runs; the retry skips the first step (its stored result is handed on)
// and resumes at the second.
func ExampleDo() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()
	key := idem.MustKey("shop", "order-42")

	runs := map[string]int{}
	chargeFails := true
	order := func(ctx context.Context, op *step.Op) (string, error) {
		stock, err := step.Run(ctx, op, "reserve", nil, func(ctx context.Context, s *step.Step) (int, error) {
			runs["reserve"]++
			return 7, nil // the reserved item
		})
		if err != nil {
			return "", err
		}
		charge, err := step.Run(ctx, op, "charge", nil, func(ctx context.Context, s *step.Step) (string, error) {
			runs["charge"]++
			if chargeFails {
				chargeFails = false
				return "", errors.New("provider timed out before sending")
			}
			return "ch_" + s.Key()[:6], nil // the provider deduplicates by s.Key()
		})
		if err != nil {
			return "", err
		}
		return step.Run(ctx, op, "record", nil, func(ctx context.Context, s *step.Step) (string, error) {
			runs["record"]++
			return fmt.Sprintf("item %d paid by %s", stock, charge), nil
		})
	}

	_, err := step.Do(ctx, store, key, nil, order)
	fmt.Println("first:", err)
	receipt, err := step.Do(ctx, store, key, nil, order)
	fmt.Println("retry:", receipt, err)
	again, _ := step.Do(ctx, store, key, nil, order) // a replay: nothing runs
	fmt.Println("replay:", again == receipt)
	fmt.Println("runs:", runs["reserve"], runs["charge"], runs["record"])
	// Output:
	// first: provider timed out before sending
	// retry: item 7 paid by ch_s1-aa1 <nil>
	// replay: true
	// runs: 1 2 1
}

// A step that fails for good undoes the finished steps, in reverse order,
// and every retry gets the failure.
func ExamplePermanent() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()
	key := idem.MustKey("shop", "order-43")

	undo := func(name string) *step.Options {
		return &step.Options{Compensate: func(ctx context.Context, key string, result []byte) error {
			fmt.Printf("undo %s (result %s)\n", name, result)
			return nil
		}}
	}
	order := func(ctx context.Context, op *step.Op) (string, error) {
		if _, err := step.Run(ctx, op, "reserve", undo("reserve"), func(ctx context.Context, s *step.Step) (int, error) {
			return 7, nil
		}); err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, op, "hold funds", undo("hold funds"), func(ctx context.Context, s *step.Step) (string, error) {
			return "h1", nil
		}); err != nil {
			return "", err
		}
		return step.Run(ctx, op, "charge", nil, func(ctx context.Context, s *step.Step) (string, error) {
			return "", step.Permanent(errors.New("card declined"))
		})
	}
	_, err := step.Do(ctx, store, key, nil, order)
	fmt.Println(err)
	_, err = step.Do(ctx, store, key, nil, order)
	fmt.Println(errors.Is(err, step.ErrFailed), err)
	// Output:
	// undo hold funds (result "h1")
	// undo reserve (result 7)
	// step: the operation failed for good at step "charge": card declined
	// true step: the operation failed for good at step "charge": card declined
}

// A process dies inside a HoldUnknown step (here: a panic in it, which
// holds the key at once): the key is held naming the step, and the
// steps that finished before it, for 'idem keys', the operations page and
// the resolver. Every later call gets an UnknownError naming the step.
func ExampleUnknownError() {
	store := memstore.New(nil)
	defer store.Close()
	ctx := context.Background()
	key := idem.MustKey("shop", "order-7")
	order := func(ctx context.Context, op *step.Op) (string, error) {
		if _, err := step.Run(ctx, op, "reserve", nil, func(context.Context, *step.Step) (int, error) { return 7, nil }); err != nil {
			return "", err
		}
		return step.Run(ctx, op, "charge", &step.Options{Unknown: step.HoldUnknown}, func(context.Context, *step.Step) (string, error) {
			panic("the process dies after sending the charge")
		})
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = step.Do(ctx, store, key, nil, order)
	}()

	rec, _ := store.Get(ctx, key)
	held, _ := idem.HeldStepOf(rec.Result)
	fmt.Println(rec.State, "in step", held.Name, "after", held.Finished)
	_, err := step.Do(ctx, store, key, nil, order)
	var unknown *step.UnknownError
	fmt.Println(errors.As(err, &unknown), unknown.Step, errors.Is(err, idem.ErrOutcomeUnknown))
	// Output:
	// held in step charge after [reserve]
	// true charge true
}
