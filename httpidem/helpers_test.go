package httpidem

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// env is one middleware over a fresh memstore, around a handler that
// counts its calls.
type env struct {
	t     *testing.T
	store *memstore.Store
	mw    *Middleware
	h     http.Handler
	calls atomic.Int64
}

func newEnv(t *testing.T, cfg *Config, handler http.HandlerFunc) *env {
	t.Helper()
	return newEnvStore(t, nil, cfg, handler)
}

// newEnvStore is newEnv over s wrapped around the memstore (s may be nil).
func newEnvStore(t *testing.T, wrap func(idem.Store) idem.Store, cfg *Config, handler http.HandlerFunc) *env {
	t.Helper()
	ms := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { ms.Close() })
	var s idem.Store = ms
	if wrap != nil {
		s = wrap(ms)
	}
	if cfg == nil {
		cfg = &Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	mw, err := New(s, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, store: ms, mw: mw}
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"echo":`+jsonString(string(b))+`}`)
		}
	}
	e.h = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.calls.Add(1)
		handler(w, r)
	}))
	return e
}

func jsonString(s string) string { b, _ := json.Marshal(s); return string(b) }

// req builds a request; key "" sends no key header; extra are header
// name/value pairs.
func req(method, target, key, body string, extra ...string) *http.Request {
	var r *http.Request
	if body == "" {
		r = httptest.NewRequest(method, target, nil)
	} else {
		r = httptest.NewRequest(method, target, strings.NewReader(body))
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		r.Header.Add(extra[i], extra[i+1])
	}
	// Every request has a caller unless the test says otherwise (anonymous
	// keyed requests are refused by default).
	if _, ok := r.Header["Authorization"]; !ok {
		r.Header.Set("Authorization", "Bearer test-caller")
	}
	return r
}

// anonReq is req without any Authorization header.
func anonReq(method, target, key, body string, extra ...string) *http.Request {
	r := req(method, target, key, body)
	r.Header.Del("Authorization")
	for i := 0; i+1 < len(extra); i += 2 {
		r.Header.Add(extra[i], extra[i+1])
	}
	return r
}

func (e *env) serve(r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	e.h.ServeHTTP(w, r)
	return w
}

func (e *env) do(method, target, key, body string, extra ...string) *httptest.ResponseRecorder {
	return e.serve(req(method, target, key, body, extra...))
}

// problemOf checks that w is a problem+json answer with status and type,
// and returns its body.
func problemOf(t *testing.T, w *httptest.ResponseRecorder, status int, typ string) Problem {
	t.Helper()
	return problemOrReplay(t, w, status, typ, false)
}

// problemOrReplay is problemOf for a problem that is (replayed) or is not
// a replay of a stored one; a stored problem also carries Cache-Control:
// no-store.
func problemOrReplay(t *testing.T, w *httptest.ResponseRecorder, status int, typ string, replayed bool) Problem {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	var p Problem
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Type != typ || p.Status != status || p.Title == "" {
		t.Fatalf("problem %+v, want type %s status %d", p, typ, status)
	}
	if got := w.Header().Get(ReplayedHeader) == "true"; got != replayed {
		t.Fatalf("Idempotent-Replayed %v, want %v", got, replayed)
	}
	if w.Header().Get("Cache-Control") != "no-store" {
		t.Fatal("a problem answer lacks Cache-Control: no-store")
	}
	return p
}

func (e *env) wantCalls(n int64) {
	e.t.Helper()
	if got := e.calls.Load(); got != n {
		e.t.Fatalf("handler ran %d times, want %d", got, n)
	}
}

// record returns the store's record for (scope, id).
// testScope is the scope of req's default caller.
var testScope, _ = HeaderScope("Authorization")(req("POST", "/", "", ""))

// record returns the record of id in scope; "" means testScope, the
// default caller's.
func (e *env) record(scope, id string) (idem.Record, error) {
	if scope == "" {
		scope = testScope
	}
	return e.store.Get(context.Background(), idem.MustKey(scope, id))
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// faultyStore fails chosen operations.
type faultyStore struct {
	idem.Store
	begin, complete, extend, release error
	completeFn                       func(owner idem.Owner, result []byte) error
}

func (s *faultyStore) Begin(ctx context.Context, r idem.BeginRequest) (idem.Claim, error) {
	if s.begin != nil {
		return idem.Claim{}, s.begin
	}
	return s.Store.Begin(ctx, r)
}

func (s *faultyStore) Complete(ctx context.Context, o idem.Owner, res []byte) error {
	if s.completeFn != nil {
		if err := s.completeFn(o, res); err != nil {
			return err
		}
	}
	if s.complete != nil {
		return s.complete
	}
	return s.Store.Complete(ctx, o, res)
}

func (s *faultyStore) Extend(ctx context.Context, o idem.Owner, d time.Duration) error {
	if s.extend != nil {
		return s.extend
	}
	return s.Store.Extend(ctx, o, d)
}

func (s *faultyStore) Release(ctx context.Context, o idem.Owner) error {
	if s.release != nil {
		return s.release
	}
	return s.Store.Release(ctx, o)
}

var errDown = idem.StoreError(context.Background(), "test", errors.New("connection refused"))
