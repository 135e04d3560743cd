package httpidem

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// A service that keeps its own records by key answers the resolver: the
// held key of a lost answer ends with the service's answer stored, or
// released when the service never saw it, and the handler runs once per
// execution.
func TestResolveURLSettlesHeldKeys(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	asked := map[string][]string{} // key → Authorization values seen
	unavailable := atomic.Int64{}
	unavailable.Store(1) // the first question fails: the key stays held, and is asked again
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		asked[key] = append(asked[key], r.Header.Get("Authorization"))
		mu.Unlock()
		if r.Method != http.MethodGet {
			t.Errorf("resolve request %s", r.Method)
		}
		if key == "a" && unavailable.Add(-1) >= 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		switch key {
		case "a": // as the client sent it
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"order":1}`)
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"type":"`+ProblemNeverHappened+`","title":"no such operation","status":404}`)
		}
	}))
	defer svc.Close()
	s := memstore.New(nil)
	defer s.Close()
	fn, err := ResolveURL(svc.URL+"/idempotency", svc.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var counted atomic.Int64
	var calls atomic.Int64
	m, err := New(s, &Config{ResolveFunc: fn, ResolvedFunc: func(o ResolveOutcome) {
		if o == ResolveResult || o == ResolveRelease {
			counted.Add(1)
		}
	}, AtMostOnce: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			OutcomeUnknown(w, errors.New("reset"))
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ran")
	}))
	post := func(key string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/orders", strings.NewReader("{}"))
		r.Header.Set("Authorization", "Bearer caller")
		r.Header.Set("Idempotency-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	for _, k := range []string{"a", `"b"`} {
		if w := post(k); w.Code != http.StatusBadGateway {
			t.Fatalf("%s: first answer %d", k, w.Code)
		}
	}
	waitFor(t, "both held keys resolved", func() bool {
		st := m.ResolverStats()
		return st.Resolved == 1 && st.Released == 1 && st.Pending == 0
	})
	if st := m.ResolverStats(); st.Failed != 1 || st.Asked != 3 || counted.Load() != 2 {
		t.Fatalf("stats %+v, counted %d", st, counted.Load())
	}
	// a: the service's answer is replayed; the handler does not run.
	if w := post("a"); w.Code != http.StatusCreated || w.Body.String() != `{"order":1}` || w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("a after resolve: %d %q", w.Code, w.Body)
	}
	// b: released; the retry runs once.
	if w := post("b"); w.Code != http.StatusCreated || w.Body.String() != "ran" || w.Header().Get(ReplayedHeader) != "" {
		t.Fatalf("b after release: %d %q", w.Code, w.Body)
	}
	if calls.Load() != 3 {
		t.Fatalf("handler ran %d times, want 3", calls.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	if len(asked["a"]) != 2 || asked["a"][0] != "Bearer caller" || len(asked[`"b"`]) != 1 {
		t.Fatalf("resolve requests %v", asked)
	}
	if rec, _ := s.Get(t.Context(), idem.MustKey(testScopeOf("Bearer caller"), "a")); rec.State != idem.StateCompleted {
		t.Fatalf("a is %v", rec.State)
	}
}

func testScopeOf(auth string) string {
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", auth)
	s, _ := HeaderScope("Authorization")(r)
	return s
}

// An operator resolving first wins: the resolver's answer finds the
// record no longer held and stops.
func TestResolverYieldsToOperator(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	s := memstore.New(nil)
	defer s.Close()
	m, err := New(s, &Config{ResolveFunc: func(ctx context.Context, q ResolveQuestion) (ResolveAnswer, error) {
		<-gate
		return ResolveAnswer{NeverHappened: true}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { OutcomeUnknown(w, errors.New("reset")) }))
	r := httptest.NewRequest("POST", "/x", nil)
	r.Header.Set("Authorization", "Bearer c")
	r.Header.Set("Idempotency-Key", "k")
	h.ServeHTTP(httptest.NewRecorder(), r)
	key := idem.MustKey(testScopeOf("Bearer c"), "k")
	rec, err := s.Get(t.Context(), key)
	if err != nil || rec.State != idem.StateHeld {
		t.Fatalf("%v %v", rec.State, err)
	}
	b, _ := EncodeResponse(200, nil, []byte("by hand"))
	if err := idem.Resolve(t.Context(), s, idem.Resolution{Digest: rec.Digest, Fence: rec.Fence, Result: b}); err != nil {
		t.Fatal(err)
	}
	close(gate)
	waitFor(t, "the resolver to stop", func() bool { return m.ResolverStats().Pending == 0 })
	if st := m.ResolverStats(); st.Released != 0 || st.Resolved != 0 {
		t.Fatalf("resolver overrode the operator: %+v", st)
	}
	if got, _ := s.Get(t.Context(), key); string(got.Result) != string(b) {
		t.Fatal("the operator's result was replaced")
	}
}
