package httpidem

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
)

// apiError is the error format of an API with its own (not RFC 9457).
type apiError struct {
	Code      string `json:"code"`
	Status    int    `json:"status"`
	Message   string `json:"message"`
	Detail    string `json:"detail"`
	RequestID string `json:"request_id"`
	Retry     int64  `json:"retry_after_ms"`
}

func writeAPIError(w http.ResponseWriter, r *http.Request, p Problem) {
	body, _ := json.Marshal(apiError{Code: p.Name(), Status: p.Status, Message: p.Title, Detail: p.Detail,
		RequestID: r.Header.Get("X-Request-Id"), Retry: p.RetryAfter.Milliseconds()})
	w.Header().Set("Content-Type", "application/vnd.acme.error+json")
	w.WriteHeader(p.Status)
	w.Write(body)
}

// apiErrorOf checks that w is the custom refusal with status and name and
// the semantic headers the middleware sets.
func apiErrorOf(t *testing.T, w *httptest.ResponseRecorder, status int, name string, retryAfter bool) apiError {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/vnd.acme.error+json" {
		t.Fatalf("%s: Content-Type %q: the refusal did not go through RefusalFunc", name, ct)
	}
	var e apiError
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil {
		t.Fatalf("body %q: %v", w.Body, err)
	}
	if e.Code != name || e.Status != status || e.Message == "" || e.RequestID != "rq-7" {
		t.Fatalf("refusal %+v, want code %s status %d from request rq-7", e, name, status)
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("%s: no Cache-Control: no-store", name)
	}
	if got := w.Header().Get("Retry-After"); (got != "") != retryAfter || (retryAfter && (got != "1" || e.Retry <= 0)) {
		t.Fatalf("%s: Retry-After %q (body %d ms), want it: %v", name, got, e.Retry, retryAfter)
	}
	if w.Header().Get(ReplayedHeader) != "" {
		t.Fatalf("%s: a refusal marked replayed", name)
	}
	// Whether a retry can help: exactly when Retry-After is sent.
	if got, want := w.Header().Get(RetryableHeader), fmt.Sprint(retryAfter); got != want {
		t.Fatalf("%s: %s %q, want %q", name, RetryableHeader, got, want)
	}
	return e
}

// TestRefusalFunc: every answer the middleware makes itself goes through
// RefusalFunc, with Retry-After and Cache-Control set by the middleware;
// stored responses (a handler's, and the held outcome-unknown problem)
// are replayed as stored.
func TestRefusalFunc(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	cfg := &Config{RefusalFunc: writeAPIError, MaxBody: 100, MaxResponse: 64, FingerprintPointers: []string{"/amount"}}
	e := newEnv(t, cfg, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/block":
			close(started)
			<-release
		case "/stream":
			w.Write(bytes.Repeat([]byte("x"), 100)) // past MaxResponse: not replayable
			return
		case "/unknown":
			OutcomeUnknown(w, ErrUpstreamTimeout)
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
	})
	do := func(method, target, key, body string, extra ...string) *httptest.ResponseRecorder {
		return e.do(method, target, key, body, append([]string{"X-Request-Id", "rq-7"}, extra...)...)
	}
	var wg sync.WaitGroup
	wg.Go(func() { do("POST", "/block", "b", `{"amount":1}`) })
	<-started
	defer func() { close(release); wg.Wait() }()

	do("POST", "/stream", "s", `{"amount":1}`)
	for _, tc := range []struct {
		name       string
		w          *httptest.ResponseRecorder
		status     int
		retryAfter bool
	}{
		{"invalid-key", do("POST", "/x", "a b", `{}`), 400, false},
		{"multiple-keys", do("POST", "/x", "k", `{}`, "Idempotency-Key", "k2"), 400, false},
		{"scope-required", e.serve(anonReq("POST", "/x", "k", `{}`, "X-Request-Id", "rq-7")), 400, false},
		{"upgrade-not-protected", do("POST", "/x", "k", `{}`, "Connection", "Upgrade", "Upgrade", "websocket"), 400, false},
		{"body-too-large", do("POST", "/x", "k", `{"amount":"`+strings.Repeat("9", 100)+`"}`), 413, false},
		{"body-not-json", do("POST", "/x", "k", `amount=1`), 400, false},
		{"in-flight", do("POST", "/block", "b", `{"amount":1}`), 409, true},
		{"key-reused", do("POST", "/block", "b", `{"amount":2}`), 422, false},
		{"response-not-replayable", do("POST", "/stream", "s", `{"amount":1}`), 410, false},
	} {
		apiErrorOf(t, tc.w, tc.status, tc.name, tc.retryAfter)
	}

	// Stored answers are not refusals: replayed as stored.
	first := do("POST", "/y", "ok", `{"amount":1}`)
	if w := do("POST", "/y", "ok", `{"amount":1,"note":"retry"}`); w.Code != 201 || w.Body.String() != "ok" || w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %s (first %d)", w.Code, w.Body, first.Code)
	}
	// The outcome-unknown answer HoldUnknown stores is in the API's shape
	// too (issue 34 §5), and says a retry cannot help: the key is held.
	unknown := do("POST", "/unknown", "u", `{"amount":1}`)
	apiErrorOf(t, unknown, 504, "outcome-unknown", false)
	again := do("POST", "/unknown", "u", `{"amount":1}`)
	if again.Code != 504 || again.Body.String() != unknown.Body.String() || again.Header().Get(ReplayedHeader) != "true" ||
		again.Header().Get(RetryableHeader) != "false" || again.Header().Get("Content-Type") != "application/vnd.acme.error+json" {
		t.Fatalf("held replay: %d %v %s", again.Code, again.Header(), again.Body)
	}

	// The store: 503 store-unavailable, with Retry-After.
	down := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, begin: errDown} }, &Config{RefusalFunc: writeAPIError, RequireKey: true}, nil)
	apiErrorOf(t, down.serve(req("POST", "/x", "k", "a", "X-Request-Id", "rq-7")), 503, "store-unavailable", true)
	apiErrorOf(t, down.serve(req("POST", "/x", "", "a", "X-Request-Id", "rq-7")), 400, "missing-key", false)
	notStored := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, complete: errDown} }, &Config{RefusalFunc: writeAPIError}, nil)
	apiErrorOf(t, notStored.serve(req("POST", "/x", "k", "a", "X-Request-Id", "rq-7")), 503, "result-not-stored", true)
}

// TestRefusalFuncConcurrentDuplicates: concurrent duplicates get the
// custom 409 while the first runs; the handler runs once.
func TestRefusalFuncConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	allOthers := make(chan struct{})
	e := newEnv(t, &Config{RefusalFunc: writeAPIError}, func(w http.ResponseWriter, r *http.Request) {
		<-allOthers
		w.WriteHeader(http.StatusCreated)
	})
	const n = 16
	ws := make([]*httptest.ResponseRecorder, n)
	var refused sync.WaitGroup
	refused.Add(n - 1)
	go func() { refused.Wait(); close(allOthers) }()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			ws[i] = e.do("POST", "/x", "dup", "a", "X-Request-Id", "rq-7")
			if ws[i].Code == http.StatusConflict {
				refused.Done()
			}
		})
	}
	wg.Wait()
	e.wantCalls(1)
	created := 0
	for _, w := range ws {
		if w.Code == http.StatusCreated {
			created++
			continue
		}
		apiErrorOf(t, w, http.StatusConflict, "in-flight", true)
	}
	if created != 1 {
		t.Fatalf("%d first answers, want 1", created)
	}
}

// TestRefusalFuncWritesNothing: a writer that writes nothing still sends
// the refusal's status, never a 200.
func TestRefusalFuncWritesNothing(t *testing.T) {
	t.Parallel()
	var got []Problem
	e := newEnv(t, &Config{RequireKey: true, RefusalFunc: func(w http.ResponseWriter, r *http.Request, p Problem) { got = append(got, p) }}, nil)
	w := e.do("POST", "/x", "", "a")
	if w.Code != http.StatusBadRequest || w.Body.Len() != 0 || w.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("%d %q %v", w.Code, w.Body, w.Header())
	}
	if len(got) != 1 || got[0].Type != ProblemMissingKey || got[0].Name() != "missing-key" || got[0].Status != 400 || got[0].Detail == "" {
		t.Fatalf("RefusalFunc got %+v", got)
	}
	e.wantCalls(0)
}

func TestProblemName(t *testing.T) {
	t.Parallel()
	for typ, name := range map[string]string{
		ProblemInFlight: "in-flight", ProblemMismatch: "key-reused", ProblemBodyNotJSON: "body-not-json",
		ProblemUpstreamUnreachable: "upstream-unreachable", "about:blank": "", "": "",
	} {
		if got := (Problem{Type: typ}).Name(); got != name {
			t.Errorf("Name of %q = %q, want %q", typ, got, name)
		}
	}
}
