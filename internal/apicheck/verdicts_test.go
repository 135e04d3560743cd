package apicheck

// Each verdict matches its evidence: one test per way an API can mislead
// the checker, against a real server built to be wrong in that one way,
// beside a correct one that passes.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

// constant executes every request and always answers the same bytes (no
// id, no marker): an answer cannot tell an execution from a replay.
type constant struct{ n atomic.Int64 }

func (c *constant) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && r.URL.Path == "/stats" {
		fmt.Fprintf(w, `{"charges":%d}`, c.n.Load())
		return
	}
	io.Copy(io.Discard, r.Body)
	if r.URL.Query().Get("fail") != "" {
		http.Error(w, "failed", http.StatusInternalServerError)
		return
	}
	c.n.Add(1)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	io.WriteString(w, `{"status":"accepted"}`)
}

func idemIn(t *testing.T, next http.Handler) http.Handler {
	t.Helper()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	mw, err := httpidem.New(store, &httpidem.Config{RequireKey: true, DropHeaders: []string{"Set-Cookie"}})
	if err != nil {
		t.Fatal(err)
	}
	return mw.Handler(next)
}

func resultOf(t *testing.T, rep *Report, id string) Result {
	t.Helper()
	for _, r := range rep.Results {
		if r.ID == id {
			return r
		}
	}
	dump(t, rep)
	t.Fatalf("no %s result", id)
	return Result{}
}

func want(t *testing.T, rep *Report, id string, st Status, detail ...string) {
	t.Helper()
	r := resultOf(t, rep, id)
	if r.Status != st {
		dump(t, rep)
		t.Fatalf("%s: %s (%s), want %s", id, r.Status, r.Detail, st)
	}
	for _, d := range detail {
		if !strings.Contains(r.Detail, d) {
			dump(t, rep)
			t.Fatalf("%s: detail %q lacks %q", id, r.Detail, d)
		}
	}
}

// TestNoPassWithoutEvidence: an API that answers every execution with the
// same bytes gets no PASS for replay-body or concurrency without an
// oracle; the WARN names the oracle that would decide. The oracle decides
// (FAIL), and idem in front of the same API passes, with the replay marker
// as its evidence.
func TestNoPassWithoutEvidence(t *testing.T) {
	t.Parallel()
	noOracle := func(c *Config) { c.Oracle, c.SlowPath = "", "" }
	rep := run(t, &constant{}, noOracle)
	for _, id := range []string{"replay-body", "concurrency", "replay-headers"} {
		want(t, rep, id, Warn, "cannot tell", "--oracle count:")
	}
	want(t, rep, "replay-effect", Skip)
	if resultOf(t, rep, "replay-effect").Enable != "--oracle" {
		t.Fatal("replay-effect's SKIP does not name --oracle")
	}

	rep = run(t, &constant{}, func(c *Config) { c.SlowPath = "" })
	want(t, rep, "replay-body", Fail, "second execution")
	want(t, rep, "replay-effect", Fail, "2 effects")
	want(t, rep, "concurrency", Fail, "12 effects")

	rep = run(t, idemIn(t, &constant{}), noOracle)
	want(t, rep, "replay-body", Pass, "Idempotent-Replayed")
	want(t, rep, "concurrency", Pass, "marked replays or refused")
}

// hangs answers the first request with a key and never answers a request
// whose key it has seen (until the client gives up).
type hangs struct {
	Naive
	mu   sync.Mutex
	seen map[string]bool
}

func (h *hangs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if k := r.Header.Get("Idempotency-Key"); k != "" && r.Method == http.MethodPost {
		k = strings.Trim(k, `"`)
		h.mu.Lock()
		again := h.seen[k]
		h.seen[k] = true
		h.mu.Unlock()
		if again {
			// Read the body, so that the server notices the client
			// leaving and cancels the context.
			io.Copy(io.Discard, r.Body)
			select {
			case <-r.Context().Done():
			case <-time.After(time.Minute):
			}
			return
		}
	}
	h.Naive.ServeHTTP(w, r)
}

// TestHangIsAFinding: an API that times out on every retry fails, and the
// evidence says where the time went.
func TestHangIsAFinding(t *testing.T) {
	t.Parallel()
	// Long enough for every answered request on a loaded machine; each
	// hung request costs it once.
	rep := run(t, &hangs{seen: map[string]bool{}}, func(c *Config) {
		c.Timeout = Duration(2 * time.Second)
		c.SlowPath, c.FailPath, c.MismatchQuery, c.MismatchPath, c.MismatchMethod = "", "", "", "", ""
	})
	for _, id := range []string{"replay-body", "replay-effect", "replay-marker", "key-forms", "concurrency", "mismatch-body"} {
		want(t, rep, id, Fail, "hung", "no response within 2s (--timeout)")
	}
	r := resultOf(t, rep, "replay-body")
	var timing string
	for _, e := range r.Evidence {
		timing += e.Timing
	}
	if !strings.Contains(timing, "request written after") {
		t.Fatalf("evidence timing %q does not say where the time went", timing)
	}
	if !rep.Failed() {
		t.Fatal("report did not fail")
	}
}

// TestSkipsNameTheirFlag: every SKIP names the flag that would enable it,
// and the summary lists them; --only and --skip select checks.
func TestSkipsNameTheirFlag(t *testing.T) {
	t.Parallel()
	rep := run(t, idemIn(t, &Naive{}), func(c *Config) {
		c.SlowPath, c.FailPath, c.OtherHeaders = "", "", nil
		c.MismatchQuery, c.MismatchPath, c.MismatchMethod = "", "", ""
		c.RequireKey = false
	})
	flags := map[string]string{
		"in-flight": "--slow-path", "failure-policy": "--fail-path", "scope-replay": "--other-header",
		"scope-reveal": "--other-header", "mismatch-query": "--mismatch-query", "mismatch-path": "--mismatch-path",
		"mismatch-method": "--mismatch-method", "key-required": "--require-key", "expiry": "--max-wait",
	}
	for id, flag := range flags {
		r := resultOf(t, rep, id)
		if r.Status != Skip || r.Enable != flag || !strings.Contains(r.Detail, flag) {
			t.Errorf("%s: %s %q enable %q, want SKIP naming %s", id, r.Status, r.Detail, r.Enable, flag)
		}
	}
	if rep.Counts[Skip] != len(flags) || rep.Clean() {
		t.Fatalf("%d skipped, want %d; Clean %v", rep.Counts[Skip], len(flags), rep.Clean())
	}
	var b strings.Builder
	WriteSummary(&b, rep)
	for _, flag := range []string{"9 skipped", "--slow-path", "--fail-path", "--other-header", "--mismatch-path", "--max-wait"} {
		if !strings.Contains(b.String(), flag) {
			t.Errorf("summary %q lacks %s", b.String(), flag)
		}
	}

	rep = run(t, idemIn(t, &Naive{}), func(c *Config) { c.Only = []string{"concurrency,replay-marker"} })
	if got := verdicts(rep); len(got) != 2 || got["concurrency"] != Pass || got["replay-marker"] != Pass {
		t.Fatalf("--only: %v", got)
	}
	rep = run(t, idemIn(t, &Naive{}), func(c *Config) { c.Skip = []string{"expiry", "in-flight"}; c.SlowPath = "" })
	if v := verdicts(rep); len(v) != len(CheckIDs)-3 || !rep.Clean() { // endpoint is reported only when it fails
		dump(t, rep)
		t.Fatalf("--skip: %d results, clean %v", len(v), rep.Clean())
	}
	for _, bad := range []Config{{URL: "http://h", Only: []string{"nope"}}, {URL: "http://h", Skip: []string{"endpoint"}}} {
		if _, err := Run(context.Background(), bad, nil); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestNoFalseAlarms: the five false alarms seen, each against the API
// that raised it; each verdict says what was observed.
func TestNoFalseAlarms(t *testing.T) {
	t.Parallel()
	// A re-executing API that sets cookies: the retry's cookie is its own.
	rep := run(t, &Naive{}, func(c *Config) { c.SlowPath = "" })
	want(t, rep, "replay-cookie", Warn, "the retry was executed")
	// ... while one that replays a stored cookie still fails.
	want(t, run(t, newFake(flaws{replayCookie: true}, &Naive{}), func(c *Config) { c.SlowPath = "" }),
		"replay-cookie", Fail, "repeats the first answer's Set-Cookie")

	// Re-executed with a constant body is not "replayed".
	rep = run(t, &constant{}, func(c *Config) { c.SlowPath = "" })
	want(t, rep, "mismatch-body", Fail, "ran under a used key", "counted 1 effect)")
	rep = run(t, &constant{}, func(c *Config) { c.SlowPath, c.Oracle = "", "" })
	want(t, rep, "mismatch-body", Fail, "replayed, or executed with a constant answer")
	want(t, run(t, newFake(flaws{ignoreBody: true}, &Naive{}), func(c *Config) { c.SlowPath = "" }),
		"mismatch-body", Fail, "was replayed", "no effect")

	// No mismatch-path or -method route named: SKIP, not WARN.
	rep = run(t, idemIn(t, &Naive{}), func(c *Config) { c.SlowPath, c.MismatchPath, c.MismatchMethod = "", "", "" })
	want(t, rep, "mismatch-path", Skip)
	want(t, rep, "mismatch-method", Skip)

	// A declared retention that was not waited out is not a PASS.
	want(t, rep, "expiry", Skip, "not waited out")

	// No idempotency at all: the scope checks cannot observe a scope.
	rep = run(t, &Naive{}, func(c *Config) { c.SlowPath = "" })
	want(t, rep, "scope-replay", Warn, "caller A's own retry was executed")
	want(t, rep, "scope-reveal", Warn, "caller A's own retry was executed")
}

// TestSendsOnlyWhereTold: without the mismatch flags nothing goes to
// another path, method or query; with them, exactly the ones named.
func TestSendsOnlyWhereTold(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	sent := map[string]bool{}
	next := idemIn(t, &Naive{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent[r.Method+" "+r.URL.RequestURI()] = true
		mu.Unlock()
		next.ServeHTTP(w, r)
	})
	allowed := map[string]bool{"POST /charges": true, "POST /charges?fail=1": true, "POST /charges?sleep=800ms": true, "GET /stats": true}
	run(t, h, func(c *Config) { c.MismatchQuery, c.MismatchPath, c.MismatchMethod = "", "", "" })
	mu.Lock()
	for s := range sent {
		if !allowed[s] {
			t.Errorf("sent %s, which no flag named", s)
		}
	}
	clear(sent)
	mu.Unlock()
	run(t, h, func(c *Config) { c.SlowPath = "" })
	mu.Lock()
	defer mu.Unlock()
	for _, s := range []string{"POST /charges?a=1", "POST /charges/other", "PATCH /charges"} {
		if !sent[s] {
			t.Errorf("%s was named but not sent", s)
		}
		allowed[s] = true
	}
	for s := range sent {
		if !allowed[s] {
			t.Errorf("sent %s, which no flag named", s)
		}
	}
}

// TestRateCountsTheBurst: the concurrency burst is charged to the rate in
// full: the request after it is scheduled N intervals later.
func TestRateCountsTheBurst(t *testing.T) {
	t.Parallel()
	c := newClient(&Config{MaxRequests: 100, Rate: 10})
	before := time.Now()
	if err := c.reserve(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	if got := c.next.Sub(before); got < 800*time.Millisecond {
		t.Fatalf("after a burst of 8 at 10/s the next request may start after %v, want ≥ 800ms", got)
	}
	if c.sent.Load() != 8 {
		t.Fatalf("budget charged %d, want 8", c.sent.Load())
	}
}

// TestClearFirstFailure: without credentials the first request is refused
// with scope-required, and the verdict names it and the flag that fixes it.
func TestClearFirstFailure(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(idemIn(t, &Naive{}))
	defer srv.Close()
	c := config(srv.URL)
	c.Headers = nil
	rep, err := Run(context.Background(), c, nil)
	if err == nil || len(rep.Results) != 1 {
		t.Fatalf("Run = %v, %v", rep, err)
	}
	want(t, rep, "endpoint", Fail, "400 scope-required", "--header 'Authorization: …'")
	var b strings.Builder
	WriteSummary(&b, rep)
	if !strings.HasPrefix(b.String(), "1 check: 0 pass, 0 warn, 1 fail") || !strings.Contains(b.String(), "; 2 requests in") {
		t.Fatalf("summary %q", b.String())
	}
	c = config(srv.URL)
	c.Path = "/nowhere"
	rep, _ = Run(context.Background(), c, nil)
	want(t, rep, "endpoint", Fail, "404", "--path")
}
