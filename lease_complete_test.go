package idem_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// slowComplete is a store whose Complete (and Release) takes delay before
// it reaches the store: a store that answers slower than the lease.
type slowComplete struct {
	idem.Store
	delay     time.Duration
	completes atomic.Int32
}

func (s *slowComplete) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	s.completes.Add(1)
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return s.Store.Complete(ctx, o, r)
}

// The lease is kept while Complete runs: a Complete that takes several
// leases does not let another caller take the key over and run the work a
// second time (issue 34 §6). Callers race for the key through Do (Wait)
// and through the engine directly, as the HTTP and RPC adapters do.
func TestLeaseHeldThroughSlowComplete(t *testing.T) {
	t.Parallel()
	// 1.5s, not less: renewals every third of it must keep up on a
	// machine at load 30 under -race (600ms lost the claim there).
	const lease = 1500 * time.Millisecond
	for _, via := range []string{"Do", "Attempt"} {
		t.Run(via, func(t *testing.T) {
			t.Parallel()
			s := &slowComplete{Store: newMem(t), delay: 4 * lease}
			key := idem.MustKey("t", "slow-complete")
			var runs atomic.Int32
			var wg sync.WaitGroup
			for i := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					if i > 0 {
						time.Sleep(time.Duration(i) * lease / 4) // some arrive during the work, some during Complete
					}
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					var err error
					switch via {
					case "Do":
						_, err = idem.Do(ctx, s, key, &idem.Options{Lease: lease, Wait: true}, func(context.Context) (int, error) {
							runs.Add(1)
							return 1, nil
						})
					default:
						c := &idem.Claimer{Store: s, Wait: -1, StoreTimeout: 10 * lease, FinishGrace: 10 * lease}
						_, _, err = runLease(ctx, c, key, lease, func(context.Context) []byte {
							runs.Add(1)
							return []byte("1")
						})
					}
					if err != nil {
						t.Errorf("caller %d: %v", i, err)
					}
				}()
			}
			wg.Wait()
			if n := runs.Load(); n != 1 {
				t.Fatalf("the work ran %d times; Complete took %v with a %v lease (%d Complete calls)", n, s.delay, lease, s.completes.Load())
			}
		})
	}
}

// runLease is run (attempt_test.go) with a lease of its own.
func runLease(ctx context.Context, c *idem.Claimer, key idem.Key, lease time.Duration, work func(context.Context) []byte) ([]byte, bool, error) {
	t, err := c.Begin(ctx, idem.BeginRequest{Key: key, Lease: lease})
	if err == nil {
		err = t.Err()
	}
	if err != nil {
		return nil, false, err
	}
	if t.Outcome == idem.Replay {
		return t.Result, true, nil
	}
	var a idem.Attempt
	wctx, err := a.Start(ctx, c, t)
	if err != nil {
		a.End()
		return nil, false, err
	}
	res := work(wctx)
	a.WorkDone(0, nil)
	a.Finishing(ctx)
	defer a.End()
	if err := a.Complete(res, nil); err != nil {
		return nil, false, err
	}
	return res, false, nil
}
