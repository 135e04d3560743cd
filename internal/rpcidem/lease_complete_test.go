package rpcidem

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/observe"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// slowComplete delays every Complete by delay: a store that answers slower
// than the lease.
type slowComplete struct {
	idem.Store
	delay time.Duration
}

func (s slowComplete) Complete(ctx context.Context, o idem.Owner, r []byte) error {
	t := time.NewTimer(s.delay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
	}
	return s.Store.Complete(ctx, o, r)
}

// A Complete slower than the lease keeps the claim (issue 34 §6): calls
// with the key that arrive while it runs are refused as in flight or
// replayed, and the call runs once.
func TestLeaseHeldThroughSlowComplete(t *testing.T) {
	t.Parallel()
	// 1.5s, not less: renewals every third of it must keep up on a
	// machine at load 30 under -race (600ms lost the claim there).
	const lease = 1500 * time.Millisecond
	ms := memstore.New(&memstore.Config{SweepInterval: -1})
	defer ms.Close()
	g, err := NewGuard(Guard{Store: slowComplete{ms, 4 * lease}, Lease: lease, StoreTimeout: 10 * lease, Protocol: observe.ProtocolGRPC})
	if err != nil {
		t.Fatal(err)
	}
	key := idem.MustKey("t", "slow-complete")
	var runs atomic.Int32
	started := make(chan struct{})
	exec := func(context.Context) Answer {
		if runs.Add(1) == 1 {
			close(started)
		}
		return Answer{Response: wrapperspb.String("ch_1")}
	}
	first := make(chan Outcome, 1)
	go func() {
		_, out, ref := g.Run(context.Background(), "/svc/Charge", key, idem.Fingerprint{}, exec)
		if ref != nil {
			t.Errorf("first call refused: %+v", ref)
		}
		first <- out
	}()
	<-started
	var wg sync.WaitGroup
	for done := false; !done; {
		select {
		case <-first:
			done = true
			continue
		case <-time.After(lease / 6):
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, out, ref := g.Run(context.Background(), "/svc/Charge", key, idem.Fingerprint{}, exec)
			if out == Refused && ref.Code != Aborted {
				t.Errorf("retry refused with %d %s", ref.Code, ref.Message)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Fatalf("the call ran %d times; Complete took %v with a %v lease", n, 4*lease, lease)
	}
}
