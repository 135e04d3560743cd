package httpidem

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// resolveRig is a middleware whose handler always loses its answer (the
// key is held), with ResolveURL asking svc.
type resolveRig struct {
	t        *testing.T
	s        *memstore.Store
	m        *Middleware
	h        http.Handler
	outcomes sync.Map // ResolveOutcome → *atomic.Int64
}

func newResolveRig(t *testing.T, svc *httptest.Server, cfg *Config) *resolveRig {
	t.Helper()
	z := &resolveRig{t: t, s: memstore.New(nil)}
	t.Cleanup(func() { z.s.Close() })
	fn, err := ResolveURL(svc.URL+"/idempotency", svc.Client(), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ResolveFunc = fn
	cfg.AtMostOnce = true
	cfg.Logger = slog.New(slog.DiscardHandler)
	cfg.ResolvedFunc = func(o ResolveOutcome) {
		n, _ := z.outcomes.LoadOrStore(o, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	if z.m, err = New(z.s, cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { z.m.Close() })
	z.h = z.m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		OutcomeUnknown(w, errors.New("reset"))
	}))
	return z
}

func (z *resolveRig) post(auth, key, body string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/charges", strings.NewReader(body))
	r.Header.Set("Authorization", auth)
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	z.h.ServeHTTP(w, r)
	return w
}

func (z *resolveRig) count(o ResolveOutcome) int64 {
	n, ok := z.outcomes.Load(o)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (z *resolveRig) state(auth, key string) idem.State {
	rec, err := z.s.Get(z.t.Context(), idem.MustKey(testScopeOf(auth), key))
	if err != nil {
		z.t.Fatalf("Get %s: %v", key, err)
	}
	return rec.State
}

// Only a 2xx answer (or never-happened) becomes the key's result (issue
// 34 §1): a 429, a 401, a plain-text 404 from a wrong path, a redirect
// (not followed: it would carry the caller's Authorization elsewhere), an
// oversized body, another request's fingerprint are refused, counted,
// and the key stays held. A 2xx answer is stored without the headers a
// first response would not store (Set-Cookie).
func TestResolveURLStoresOnlyWhatCanBeAResult(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		io.WriteString(w, "followed")
	}))
	defer other.Close()
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Header.Get("Idempotency-Key") {
		case "429":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "401":
			http.Error(w, "who are you", http.StatusUnauthorized)
		case "404":
			http.Error(w, "404 page not found", http.StatusNotFound)
		case "302":
			http.Redirect(w, r, other.URL+"/steal", http.StatusFound)
		case "huge":
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 2<<10)) // over MaxResponse (1 KiB here)
		case "other-fp":
			w.Header().Set(FingerprintHeader, strings.Repeat("ab", 32))
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charge":"someone else's"}`)
		case "ok":
			if fp := r.Header.Get(FingerprintHeader); len(fp) == 64 {
				w.Header().Set(FingerprintHeader, strings.ToUpper(fp))
			}
			w.Header().Set("Set-Cookie", "session=alice")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charge":"ch_1"}`)
		}
	}))
	defer svc.Close()
	z := newResolveRig(t, svc, &Config{MaxResponse: 1 << 10})
	refused := []string{"429", "401", "404", "302", "huge", "other-fp"}
	for _, k := range append(refused, "ok") {
		if w := z.post("Bearer alice", k, "{}"); w.Code != http.StatusBadGateway {
			t.Fatalf("%s: first answer %d", k, w.Code)
		}
	}
	waitFor(t, "every held key asked about once", func() bool {
		return z.count(ResolveRefused) >= int64(len(refused)) && z.count(ResolveResult) == 1
	})
	for _, k := range refused {
		if st := z.state("Bearer alice", k); st != idem.StateHeld {
			t.Errorf("%s: the key is %v after the service's answer, want still held", k, st)
		}
		if w := z.post("Bearer alice", k, "{}"); w.Code != http.StatusBadGateway || !strings.Contains(w.Body.String(), "outcome-unknown") {
			t.Errorf("%s: a retry got %d %s, want the held answer", k, w.Code, w.Body)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
	if st := z.m.ResolverStats(); st.Refused < uint64(len(refused)) || st.Resolved != 1 {
		t.Errorf("stats %+v", st)
	}
	w := z.post("Bearer alice", "ok", "{}")
	if w.Code != http.StatusCreated || w.Body.String() != `{"charge":"ch_1"}` || w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("ok: %d %q", w.Code, w.Body)
	}
	if c := w.Header().Values("Set-Cookie"); len(c) != 0 {
		t.Errorf("the resolved answer replays Set-Cookie %q", c)
	}
	if w.Header().Get(FingerprintHeader) != "" {
		t.Errorf("the resolved answer replays %s", FingerprintHeader)
	}
}

// The question ties the answer to the held request (issue 34 §1): caller
// B reuses the key caller A used; B's request is held; the question
// carries B's Authorization, B's scope digest, the request's method and
// path, and its fingerprint; a service that looks records up by (caller,
// key) has none for B, and B's key is released, never answered with A's
// record.
func TestResolveQuestionTiesTheCaller(t *testing.T) {
	t.Parallel()
	type question struct{ auth, scope, request, fp string }
	var mu sync.Mutex
	var asked []question
	records := map[string]string{"Bearer alice\x00k": `{"charge":"alice's"}`} // by (caller, key)
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := question{r.Header.Get("Authorization"), r.Header.Get(ResolveScopeHeader), r.Header.Get(ResolveRequestHeader), r.Header.Get(FingerprintHeader)}
		mu.Lock()
		asked = append(asked, q)
		mu.Unlock()
		body, ok := records[q.auth+"\x00"+r.Header.Get("Idempotency-Key")]
		if !ok {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"type":%q,"status":404}`, ProblemNeverHappened)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, body)
	}))
	defer svc.Close()
	z := newResolveRig(t, svc, &Config{})
	if w := z.post("Bearer bob", "k", `{"amount":5}`); w.Code != http.StatusBadGateway {
		t.Fatalf("bob's first answer %d", w.Code)
	}
	waitFor(t, "bob's key released", func() bool { return z.count(ResolveRelease) == 1 })
	mu.Lock()
	defer mu.Unlock()
	want := question{"Bearer bob", ScopeDigest(testScopeOf("Bearer bob")), "POST /charges", ""}
	if len(asked) != 1 {
		t.Fatalf("asked %d times", len(asked))
	}
	got := asked[0]
	if len(got.fp) != 64 {
		t.Errorf("fingerprint %q, want 64 hex digits", got.fp)
	}
	got.fp = ""
	if got != want {
		t.Errorf("question %+v, want %+v", got, want)
	}
	if st := z.state("Bearer bob", "k"); st == idem.StateCompleted {
		t.Errorf("bob's key was completed with a record of someone else")
	}
}
