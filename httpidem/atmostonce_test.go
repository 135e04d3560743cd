package httpidem

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// abandon leaves a claim as a process that died would: acquired (and,
// when started, marked), never finished.
func abandon(t *testing.T, e *env, id string, started bool) {
	t.Helper()
	key := idem.MustKey(testScope, id)
	fp := e.mw.fingerprint(req("POST", "/charges", id, "a"), []byte("a"))
	c, err := e.store.Begin(context.Background(), idem.BeginRequest{Key: key, Fingerprint: fp, Lease: 50 * time.Millisecond})
	if err != nil || c.Outcome != idem.Acquired {
		t.Fatalf("begin: %+v %v", c, err)
	}
	if started {
		if err := e.store.MarkStarted(context.Background(), c.Owner); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAtMostOnce: a takeover of a claim whose holder had started never
// runs the handler: the key is held as outcome-unknown for every retry. A
// takeover of a claim that was never started runs it, told it may be a
// re-execution.
func TestAtMostOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{AtMostOnce: true, Lease: 50 * time.Millisecond}, nil)
	abandon(t, e, "started", true)
	abandon(t, e, "not-started", false)
	// The first answer that is not 409 is the takeover's, not a replay of
	// it: no request before the loop, whose answer the loop would drop if
	// the lease had already run out (a slow machine).
	var w *httptest.ResponseRecorder
	waitFor(t, "the takeover", func() bool { w = e.do("POST", "/charges", "started", "a"); return w.Code != http.StatusConflict })
	p := problemOf(t, w, http.StatusBadGateway, ProblemOutcomeUnknown)
	if p.Detail == "" {
		t.Fatal("no detail")
	}
	problemOrReplay(t, e.do("POST", "/charges", "started", "a"), http.StatusBadGateway, ProblemOutcomeUnknown, true)
	e.wantCalls(0)
	waitFor(t, "the takeover", func() bool { w = e.do("POST", "/charges", "not-started", "a"); return w.Code != http.StatusConflict })
	if w.Code != http.StatusCreated {
		t.Fatalf("not started: %d %s", w.Code, w.Body)
	}
	e.wantCalls(1)
	// The mark is made before the handler runs.
	var marked bool
	e2 := newEnv(t, &Config{AtMostOnce: true}, nil)
	e2.h = e2.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec, err := e2.record("", "m")
		marked = err == nil && rec.Started
		w.WriteHeader(201)
	}))
	e2.do("POST", "/charges", "m", "a")
	if !marked {
		t.Fatal("the handler ran before the claim was marked")
	}
	if _, err := New(e.store, &Config{AtMostOnce: true, UnknownOutcome: ReleaseUnknown}); err == nil {
		t.Fatal("AtMostOnce with ReleaseUnknown accepted")
	}
}

// failingMark is a store whose MarkStarted fails.
type failingMark struct{ idem.Store }

func (failingMark) MarkStarted(context.Context, idem.Owner) error {
	return idem.StoreError(context.Background(), "mark", errors.New("connection reset"))
}

func TestAtMostOnceMarkFails503(t *testing.T) {
	t.Parallel()
	e := newEnvStore(t, func(s idem.Store) idem.Store { return failingMark{s} }, &Config{AtMostOnce: true}, nil)
	problemOf(t, e.do("POST", "/charges", "f", "a"), http.StatusServiceUnavailable, ProblemStoreUnavailable)
	e.wantCalls(0)
	if rec, _ := e.record("", "f"); rec.State != idem.StateReleased {
		t.Fatalf("record %v, want released: nothing ran", rec.State)
	}
}

// hangingExtend is a store whose Extend never answers until its context
// ends: the store is unreachable for renewals.
type hangingExtend struct{ idem.Store }

func (hangingExtend) Extend(ctx context.Context, _ idem.Owner, _ time.Duration) error {
	<-ctx.Done()
	return idem.StoreError(ctx, "extend", ctx.Err())
}

// TestRenewalsUnreachableCancelHandler: when no renewal succeeds, the
// handler's context is cancelled with ErrLeaseLost before the lease could
// run out, and its result is not stored as if the claim were still held.
func TestRenewalsUnreachableCancelHandler(t *testing.T) {
	t.Parallel()
	cause := make(chan error, 1)
	e := newEnvStore(t, func(s idem.Store) idem.Store { return hangingExtend{s} }, &Config{Lease: 150 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		cause <- context.Cause(r.Context())
		w.WriteHeader(201)
	})
	e.do("POST", "/charges", "h", "a")
	if err := <-cause; !errors.Is(err, idem.ErrLeaseLost) {
		t.Fatalf("handler context ended with %v, want ErrLeaseLost", err)
	}
}
