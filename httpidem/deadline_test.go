package httpidem

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// silentStore answers nothing while silent is set: each call waits for its
// context to end, as a driver on a black-holed connection does at best.
// (The SQL and Redis stores behind a real black-holing TCP proxy are
// tested through idem proxy: cmd/idem TestE2EStoreBlackHole.)
type silentStore struct {
	idem.Store
	silent atomic.Bool
}

func (s *silentStore) hang(ctx context.Context) error {
	<-ctx.Done()
	return idem.StoreError(ctx, "call", context.Cause(ctx))
}

func (s *silentStore) Begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, error) {
	if s.silent.Load() {
		return idem.Claim{}, s.hang(ctx)
	}
	return s.Store.Begin(ctx, req)
}

func (s *silentStore) Complete(ctx context.Context, o idem.Owner, result []byte) error {
	if s.silent.Load() {
		return s.hang(ctx)
	}
	return s.Store.Complete(ctx, o, result)
}

// TestStoreTimeoutBoundsEveryCall: a silent store never hangs a request,
// and a request whose client left (its context cancelled) still ends:
// Begin past StoreTimeout is 503 store-unavailable with Retry-After before
// the handler runs; a Complete past it after the handler answered is 503
// result-not-stored, and the key does not run again.
func TestStoreTimeoutBoundsEveryCall(t *testing.T) {
	t.Parallel()
	var ss *silentStore
	leave := func() {} // the client leaves while the handler runs
	e := newEnvStore(t, func(s idem.Store) idem.Store { ss = &silentStore{Store: s}; return ss },
		&Config{StoreTimeout: 200 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Silence") != "" {
				ss.silent.Store(true) // the store goes silent while the handler runs
				leave()
			}
			w.WriteHeader(http.StatusCreated)
		})
	ss.silent.Store(true)
	w := e.do("POST", "/x", "begin", "x")
	problemOf(t, w, http.StatusServiceUnavailable, ProblemStoreUnavailable)
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	if e.calls.Load() != 0 {
		t.Fatal("the handler ran without a claim")
	}
	ss.silent.Store(false)

	// The client goes away before the answer: finishing still ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	leave = cancel
	w = e.serve(req("POST", "/x", "complete", "x", "X-Silence", "1").WithContext(ctx))
	problemOf(t, w, http.StatusServiceUnavailable, ProblemNotStored)
	ss.silent.Store(false)
	problemOf(t, e.do("POST", "/x", "complete", "x"), http.StatusConflict, ProblemInFlight)
}
