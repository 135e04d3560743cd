package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
)

// heldStore is a migrated SQLite store with two held keys (one held by
// the HTTP middleware as the proxy scopes it, one by idem.Do), a completed
// one, and the middleware, which answers retries from the same file.
type heldStore struct {
	dsn   string
	store idem.Store
	mw    http.Handler
	calls int
}

func newHeldStore(t *testing.T) *heldStore {
	t.Helper()
	dsn := "sqlite:" + filepath.Join(t.TempDir(), "idem.db")
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatalf("migrate: %s", errs)
	}
	store := openDSN(t, dsn)
	hs := &heldStore{dsn: dsn, store: store}
	m, err := httpidem.New(store, &httpidem.Config{ScopeFunc: proxyScopeFunc(nil, false)})
	if err != nil {
		t.Fatal(err)
	}
	hs.mw = m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.calls++
		if r.URL.Path == "/lost" {
			httpidem.OutcomeUnknown(w, errors.New("upstream reset"))
			return
		}
		w.WriteHeader(201)
		w.Write([]byte("made"))
	}))
	return hs
}

func (hs *heldStore) post(t *testing.T, path, key string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("POST", path, strings.NewReader("{}"))
	r.Header.Set("Authorization", "Bearer t0k3n")
	r.Header.Set("Idempotency-Key", key)
	w := httptest.NewRecorder()
	hs.mw.ServeHTTP(w, r)
	return w
}

func TestKeysHeldListGetResolve(t *testing.T) {
	t.Parallel()
	hs := newHeldStore(t)
	ctx := context.Background()
	if w := hs.post(t, "/lost", `"a"`); w.Code != http.StatusBadGateway {
		t.Fatalf("first answer %d", w.Code)
	}
	hs.post(t, "/lost", `"b"`)
	hs.post(t, "/made", `"c"`)
	doKey := idem.MustKey("svc", "pay-1")
	func() {
		defer func() { _ = recover() }()
		_, _ = idem.Do(ctx, hs.store, doKey, &idem.Options{AtMostOnce: true}, func(context.Context) (int, error) { panic("lost") })
	}()

	// list --state held: exactly the three held keys, newest first.
	code, out, errs := runCLI(t, "keys", "list", "--store", hs.dsn, "--state", "held")
	if code != 0 {
		t.Fatalf("keys list: %s", errs)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The first line is the store's replication (issue 33), then the table.
	if len(lines) == 0 || lines[0] != "replication: single server (SQLite: one file, no replicas)" {
		t.Fatalf("keys list --state held does not start with the store's replication:\n%s", out)
	}
	lines = lines[1:]
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "DIGEST") || lines[4] != "3 held keys" ||
		!strings.Contains(lines[1], doKey.Digest().String()) || !strings.Contains(lines[2], "POST /lost") ||
		!strings.Contains(lines[2], httpidem.ScopeDigest(scopeOf(t))) || !strings.Contains(lines[2], "502") {
		t.Fatalf("keys list --state held:\n%s", out)
	}
	var views []recordView
	code, out, errs = runCLI(t, "keys", "list", "--store", hs.dsn, "--state", "held", "--json")
	if err := json.Unmarshal([]byte(out), &views); code != 0 || err != nil || len(views) != 3 {
		t.Fatalf("keys list --json: %d %v %s %s", code, err, errs, out)
	}
	for _, v := range views {
		if v.State != "held" || v.AgeSeconds < 0 {
			t.Fatalf("held view %+v", v)
		}
	}
	held := views[1] // "b"
	if held.Request != "POST /lost" || held.Response == nil || !held.Response.OutcomeUnknown {
		t.Fatalf("held HTTP view %+v", held)
	}

	// get by the short digest log lines print, decoded.
	code, out, errs = runCLI(t, "keys", "get", "--store", hs.dsn, "--digest", held.Digest[:16])
	if code != 0 || !strings.Contains(out, "state:       held") || !strings.Contains(out, "HTTP 502 Bad Gateway (outcome unknown") ||
		!strings.Contains(out, "Content-Type: application/problem+json") || !strings.Contains(out, `"type":"https://`) {
		t.Fatalf("keys get --digest: %d %s\n%s", code, errs, out)
	}

	// resolve with the service's answer: the retry replays it.
	bodyFile := filepath.Join(t.TempDir(), "order.json")
	if err := os.WriteFile(bodyFile, []byte(`{"order":17}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errs = runCLI(t, "keys", "resolve", "--store", hs.dsn, "--digest", held.Digest,
		"--status", "201", "--header", "Content-Type: application/json", "--body", "@"+bodyFile)
	if code != 0 || !strings.Contains(out, "replaced:") || !strings.Contains(out, "HTTP 502") || !strings.Contains(out, "resolved "+held.Digest) {
		t.Fatalf("keys resolve: %d %s\n%s", code, errs, out)
	}
	calls := hs.calls
	w := hs.post(t, "/lost", `"b"`)
	if w.Code != 201 || w.Body.String() != `{"order":17}` || w.Header().Get("Content-Type") != "application/json" || w.Header().Get(httpidem.ReplayedHeader) != "true" || hs.calls != calls {
		t.Fatalf("retry after resolve: %d %v %q (calls %d→%d)", w.Code, w.Header(), w.Body, calls, hs.calls)
	}
	// Again: the record is no longer held; nothing is replaced.
	if code, _, errs := runCLI(t, "keys", "resolve", "--store", hs.dsn, "--digest", held.Digest, "--release"); code != 1 || !strings.Contains(errs, "not held") {
		t.Fatalf("second resolve: %d %s", code, errs)
	}

	// release by KEY and the proxy's scope headers: the retry runs.
	code, out, errs = runCLI(t, "keys", "resolve", "--store", hs.dsn, "--request-header", "Authorization: Bearer t0k3n", `"a"`, "--release")
	if code != 0 || !strings.Contains(out, "released") {
		t.Fatalf("keys resolve --release: %d %s\n%s", code, errs, out)
	}
	if w := hs.post(t, "/lost", `"a"`); w.Code != http.StatusBadGateway || w.Header().Get(httpidem.ReplayedHeader) != "" || hs.calls != calls+1 {
		t.Fatalf("retry after release: %d replayed %q calls %d", w.Code, w.Header().Get(httpidem.ReplayedHeader), hs.calls)
	}

	// A key held by idem.Do takes the JSON of its value.
	if code, _, errs := runCLI(t, "keys", "resolve", "--store", hs.dsn, "--scope", "svc", "pay-1", "--status", "200", "--body", "1"); code != 2 || !strings.Contains(errs, "idem.Do") {
		t.Fatalf("resolve of a Do key with --status: %d %s", code, errs)
	}
	if code, _, errs := runCLI(t, "keys", "resolve", "--store", hs.dsn, "--scope", "svc", "pay-1", "--body", "42"); code != 0 {
		t.Fatalf("resolve of a Do key: %d %s", code, errs)
	}
	v, err := idem.Do(ctx, hs.store, doKey, nil, func(context.Context) (int, error) { t.Fatal("ran"); return 0, nil })
	if err != nil || v != 42 {
		t.Fatalf("Do after resolve = %v, %v", v, err)
	}

	// Only held keys: a completed one is refused.
	if code, _, errs := runCLI(t, "keys", "resolve", "--store", hs.dsn, "--request-header", "Authorization: Bearer t0k3n", `"c"`, "--release"); code != 1 || !strings.Contains(errs, "not held") {
		t.Fatalf("resolve of a completed key: %d %s", code, errs)
	}
	if code, _, errs := runCLI(t, "keys", "resolve", "--store", hs.dsn, "--digest", held.Digest); code != 2 {
		t.Fatalf("resolve without a result: %d %s", code, errs)
	}
}

// scopeOf is the proxy's scope of the test's requests.
func scopeOf(t *testing.T) string {
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer t0k3n")
	s, err := proxyScopeFunc(nil, false)(r)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
