package idemclient_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/memstore"
)

// service is a real httpidem middleware on memstore in front of a handler
// that counts its effects per key, behind a front that can lose the
// answer of a request after the service acted (the connection is closed
// before a byte of the answer is written).
type service struct {
	srv   *httptest.Server
	store *memstore.Store

	mu      sync.Mutex
	effects map[string]int
	bodies  map[string][]string

	// loseNext: the next n answers are lost after the service acted.
	loseNext atomic.Int64
	// loseEvery: when > 0, every loseEvery-th answer is lost.
	loseEvery atomic.Int64
	requests  atomic.Int64

	// handle, when set, answers instead of the counting handler (after
	// counting).
	handle func(w http.ResponseWriter, r *http.Request, n int)
}

func newService(t testing.TB) *service {
	t.Helper()
	s := &service{store: memstore.New(nil), effects: map[string]int{}, bodies: map[string][]string{}}
	mw, err := httpidem.New(s.store, &httpidem.Config{SharedAnonymousScope: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	inner := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, _ := httpidem.ParseKey(r.Header.Get("Idempotency-Key"))
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.effects[key]++
		n := s.effects[key]
		s.bodies[key] = append(s.bodies[key], string(body))
		s.mu.Unlock()
		if s.handle != nil {
			s.handle(w, r, n)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "created %s", body)
	}))
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := s.requests.Add(1)
		lose := s.loseNext.Add(-1) >= 0
		if e := s.loseEvery.Load(); e > 0 && i%e == 0 {
			lose = true
		}
		if !lose {
			inner.ServeHTTP(w, r)
			return
		}
		// The service acts; its answer is lost on the way back.
		inner.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			conn.Close()
		}
	}))
	t.Cleanup(func() {
		s.srv.Close()
		s.store.Close()
	})
	return s
}

func (s *service) effectsOf(key string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.effects[key]
}

func (s *service) allEffects() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := make(map[string]int, len(s.effects))
	for k, v := range s.effects {
		m[k] = v
	}
	return m
}

// recorder is an Observer that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []idemclient.Event
	notify chan idemclient.Event // when set, every event is also sent here
}

func (r *recorder) Observe(_ context.Context, e idemclient.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
	if r.notify != nil {
		r.notify <- e
	}
}

func (r *recorder) attempts() []idemclient.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []idemclient.Event
	for _, e := range r.events {
		if e.Kind == idemclient.EventAttempt {
			out = append(out, e)
		}
	}
	return out
}

// counting counts the attempts that reach the inner transport.
type counting struct {
	inner http.RoundTripper
	n     atomic.Int64
}

func (c *counting) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return c.inner.RoundTrip(r)
}

func newClient(t testing.TB, cfg *idemclient.Config) *http.Client {
	t.Helper()
	tr, err := idemclient.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Transport: tr}
}

func readAll(t testing.TB, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
