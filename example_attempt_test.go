package idem_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// An adapter for a protocol of its own (here: jobs from a queue, keyed by
// their id) runs the claim sequence through a Claimer and an Attempt and
// keeps only its mapping: what a replay, a refusal and a result look like
// in its protocol.
func ExampleClaimer() {
	store := memstore.New(nil)
	defer store.Close()
	c := &idem.Claimer{Store: store}

	runJob := func(ctx context.Context, id string, work func(context.Context) string) (string, error) {
		key := idem.MustKey("jobs", id)
		t, err := c.Begin(ctx, idem.BeginRequest{Key: key})
		if err != nil {
			return "", err // the store is down: retry the job later
		}
		switch t.Outcome {
		case idem.Replay:
			return string(t.Result) + " (replayed)", nil
		case idem.InFlight, idem.Mismatch:
			return "", t.Err()
		}
		var a idem.Attempt
		wctx, err := a.Start(ctx, c, t)
		if err != nil {
			a.End()
			return "", err
		}
		// The lease is renewed while the work runs. A work that panics
		// has not stored anything: Run releases the claim on the
		// panic's way out, so the job's retry runs it again.
		var result string
		a.Run(ctx, func() { result = work(wctx) }, func() (int, error) {
			return 0, errors.New("job panicked")
		}, func(context.Context) { _ = a.Release() })
		a.WorkDone(0, nil)
		a.Finishing(ctx)
		defer a.End()
		// The result reaches the caller only once it is durable.
		if err := a.Complete([]byte(result), nil); err != nil {
			return "", err
		}
		return result, nil
	}

	for range 2 {
		out, err := runJob(context.Background(), "job-7", func(ctx context.Context) string {
			return fmt.Sprintf("sent invoice (fence>0: %v)", idem.FenceFromContext(ctx) > 0)
		})
		fmt.Println(out, err)
	}
	// Output:
	// sent invoice (fence>0: true) <nil>
	// sent invoice (fence>0: true) (replayed) <nil>
}
