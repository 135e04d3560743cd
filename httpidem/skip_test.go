package httpidem

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// TestSkipFunc: a protected-method request that SkipFunc picks passes
// through untouched, even with an invalid key or none where one is
// required, runs every time (concurrent duplicates included: no 409, no
// replay) and is logged as "skipped"; the others are protected as usual.
func TestSkipFunc(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	var seenKey sync.Map
	skip := func(r *http.Request) bool { return r.Header.Get("X-Dry-Run") == "1" }
	e := newEnv(t, &Config{RequireKey: true, SkipFunc: skip, Logger: logger}, func(w http.ResponseWriter, r *http.Request) {
		seenKey.Store(r.Header.Get("Idempotency-Key"), true) // untouched: the handler sees what was sent
		w.WriteHeader(http.StatusAccepted)
	})
	const n = 12
	var wg sync.WaitGroup
	codes := make([]int, n)
	for i := range n {
		wg.Go(func() {
			w := e.do("POST", "/charges", "dry-1", "a", "X-Dry-Run", "1")
			codes[i] = w.Code
			if w.Header().Get(ReplayedHeader) != "" {
				t.Error("a skipped request was replayed")
			}
		})
	}
	wg.Wait()
	for i, c := range codes {
		if c != http.StatusAccepted {
			t.Fatalf("request %d: %d, want 202", i, c)
		}
	}
	e.wantCalls(n)
	if rec, err := e.record("", "dry-1"); err == nil {
		t.Fatalf("a skipped request left a record: %+v", rec)
	}
	if _, ok := seenKey.Load("dry-1"); !ok {
		t.Fatal("the handler did not see the request's key header")
	}
	// Checks that would refuse a protected request do not apply.
	if w := e.do("POST", "/charges", "", "a", "X-Dry-Run", "1"); w.Code != http.StatusAccepted {
		t.Fatalf("no key, RequireKey, skipped: %d", w.Code)
	}
	if w := e.do("POST", "/charges", "bad key", "a", "X-Dry-Run", "1"); w.Code != http.StatusAccepted {
		t.Fatalf("invalid key, skipped: %d", w.Code)
	}
	e.wantCalls(n + 2)
	// Not skipped: protected.
	problemOf(t, e.do("POST", "/charges", "", "a"), http.StatusBadRequest, ProblemMissingKey)
	e.do("POST", "/charges", "real", "a")
	if w := e.do("POST", "/charges", "real", "a"); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatal("a request SkipFunc does not pick was not protected")
	}
	e.wantCalls(n + 3)

	mu.Lock()
	out := buf.String()
	mu.Unlock()
	skipped := 0
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["outcome"] == "skipped" {
			skipped++
			if rec["level"] != "DEBUG" || rec["key"] != nil {
				t.Fatalf("skipped line %v: want level DEBUG and no key", rec)
			}
		}
	}
	if skipped != n+2 {
		t.Fatalf("%d skipped log lines, want %d:\n%s", skipped, n+2, out)
	}
}

// TestSkipFuncNotAskedForUnprotectedMethods: SkipFunc is only asked about
// protected methods.
func TestSkipFuncNotAskedForUnprotectedMethods(t *testing.T) {
	t.Parallel()
	asked := 0
	e := newEnv(t, &Config{SkipFunc: func(*http.Request) bool { asked++; return false }}, nil)
	e.do("GET", "/x", "k", "")
	e.do("PUT", "/x", "k", "a")
	if asked != 0 {
		t.Fatalf("SkipFunc asked %d times for unprotected methods", asked)
	}
	e.do("POST", "/x", "k", "a")
	if asked != 1 {
		t.Fatalf("SkipFunc asked %d times for one POST", asked)
	}
}
