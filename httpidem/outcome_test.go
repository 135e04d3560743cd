package httpidem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// wrapped is outer middleware's ResponseWriter: OutcomeUnknown and NotSent
// find the recorder under it.
type wrapped struct{ http.ResponseWriter }

func (w wrapped) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func TestOutcomeUnknownHold(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cause  error
		status int
	}{
		{errors.New("connection reset"), http.StatusBadGateway},
		{ErrUpstreamTimeout, http.StatusGatewayTimeout},
		{context.DeadlineExceeded, http.StatusGatewayTimeout},
	} {
		e := newEnv(t, &Config{StoreStatusFunc: StripeStoreStatus}, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Partial", "1")
			io.WriteString(w, "half an answ")
			if !OutcomeUnknown(wrapped{w}, tc.cause) {
				t.Error("OutcomeUnknown: not a protected writer")
			}
		})
		first := e.do("POST", "/charges", "u", "a")
		p := problemOrReplay(t, first, tc.status, ProblemOutcomeUnknown, false)
		if first.Header().Get("X-Partial") != "" || first.Header().Get("Retry-After") != "" || p.Detail == "" {
			t.Fatalf("first answer %v %+v", first.Header(), p)
		}
		for range 2 {
			again := e.do("POST", "/charges", "u", "a")
			problemOrReplay(t, again, tc.status, ProblemOutcomeUnknown, true)
			if again.Body.String() != first.Body.String() {
				t.Fatalf("replay %q, first %q", again.Body, first.Body)
			}
		}
		e.wantCalls(1)
		rec, err := e.record("", "u")
		if err != nil {
			t.Fatal(err)
		}
		sr, err := decodeResponse(rec.Result)
		if err != nil || !sr.OutcomeUnknown || sr.NotReplayable {
			t.Fatalf("stored %+v %v", sr, err)
		}
	}
}

func TestOutcomeUnknownRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{UnknownOutcome: ReleaseUnknown}, func(w http.ResponseWriter, r *http.Request) {
		OutcomeUnknown(w, ErrUpstreamTimeout)
	})
	w := e.do("POST", "/charges", "u", "a")
	problemOf(t, w, http.StatusGatewayTimeout, ProblemOutcomeUnknown)
	if w.Header().Get("Retry-After") == "" {
		t.Fatal("release mode: no Retry-After")
	}
	if rec, _ := e.record("", "u"); rec.State != idem.StateReleased {
		t.Fatalf("record %v, want released", rec.State)
	}
	e.do("POST", "/charges", "u", "a")
	e.wantCalls(2)
}

func TestNotSentReleasesEvenInStripeMode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{StoreStatusFunc: StripeStoreStatus}, func(w http.ResponseWriter, r *http.Request) {
		NotSent(w)
		WriteProblem(w, Problem{Type: ProblemUpstreamUnreachable, Title: "x", Status: 502, RetryAfter: time.Second})
	})
	w := e.do("POST", "/charges", "n", "a")
	if w.Code != 502 || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("answer %d %v", w.Code, w.Header())
	}
	if rec, _ := e.record("", "n"); rec.State != idem.StateReleased {
		t.Fatalf("record %v, want released", rec.State)
	}
	// Outside a protected request the signals report false.
	if NotSent(httptest.NewRecorder()) || OutcomeUnknown(httptest.NewRecorder(), nil) {
		t.Fatal("signals accepted on an unprotected writer")
	}
}

// TestReexecutionAfterTakeover: the handler that runs after a takeover is
// told it may be a re-execution; the first one is not.
func TestReexecutionAfterTakeover(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []bool
	e := newEnv(t, &Config{Lease: 50 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, IsReexecution(r.Context()))
		mu.Unlock()
		w.WriteHeader(201)
	})
	// A claim whose holder died: acquired directly, never finished.
	key := idem.MustKey(testScope, "t")
	fp := e.mw.fingerprint(req("POST", "/charges", "t", "a"), []byte("a"))
	if _, err := e.store.Begin(context.Background(), idem.BeginRequest{Key: key, Fingerprint: fp, Lease: 50 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the takeover", func() bool { return e.do("POST", "/charges", "t", "a").Code == 201 })
	e.do("POST", "/charges", "fresh", "a")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || !seen[0] || seen[1] {
		t.Fatalf("IsReexecution per call: %v, want [true false]", seen)
	}
}

func TestUpgradeRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	problemOf(t, e.do("POST", "/ws", "k", "a", "Connection", "Upgrade", "Upgrade", "websocket"), http.StatusBadRequest, ProblemUpgrade)
	e.wantCalls(0)
	if _, err := e.record("", "k"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("refused upgrade left a record: %v", err)
	}
}
