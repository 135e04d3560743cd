package httpidem

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
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

// A Complete slower than the lease keeps the claim (issue 34 §6): the
// retries that arrive while it runs are refused as in flight or replayed,
// and the handler runs once.
func TestLeaseHeldThroughSlowComplete(t *testing.T) {
	t.Parallel()
	// 1.5s, not less: renewals every third of it must keep up on a
	// machine at load 30 under -race (600ms lost the claim there).
	const lease = 1500 * time.Millisecond
	started := make(chan struct{}, 1)
	e := newEnvStore(t, func(s idem.Store) idem.Store { return slowComplete{s, 4 * lease} },
		&Config{Lease: lease, StoreTimeout: 10 * lease}, func(w http.ResponseWriter, r *http.Request) {
			select {
			case started <- struct{}{}:
			default:
			}
			w.WriteHeader(http.StatusCreated)
		})
	first := make(chan int, 1)
	go func() { first <- e.do("POST", "/charges", "k", `{"amount":1}`).Code }()
	<-started
	// Retries until the first is answered: every one must be a 409 (in
	// flight) or, after the first returned, a replay.
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for time.Now().Before(deadline) {
		select {
		case code := <-first:
			if code != http.StatusCreated {
				t.Fatalf("first request = %d, want 201", code)
			}
			wg.Wait()
			w := e.do("POST", "/charges", "k", `{"amount":1}`)
			if w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "true" {
				t.Fatalf("after: %d replayed=%q, want the replay", w.Code, w.Header().Get(ReplayedHeader))
			}
			if n := e.calls.Load(); n != 1 {
				t.Fatalf("the handler ran %d times; Complete took %v with a %v lease", n, 4*lease, lease)
			}
			return
		default:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := e.do("POST", "/charges", "k", `{"amount":1}`)
			if w.Code != http.StatusConflict && w.Code != http.StatusCreated {
				t.Errorf("retry = %d %s", w.Code, w.Body)
			}
		}()
		time.Sleep(lease / 6)
	}
	t.Fatal("the first request was not answered within a minute")
}
