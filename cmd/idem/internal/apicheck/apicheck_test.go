package apicheck

import (
	"bytes"
	"context"
	"encoding/json"
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

// flaws are the ways the fake idempotency layer can be broken.
type flaws struct {
	checkThenAct bool // looks the key up, then inserts: both racers run
	ignoreBody   bool // fingerprint without the body
	store5xx     bool // keeps 5xx answers
	noScope      bool // one keyspace for every caller
	replayCookie bool // stores Set-Cookie with the response
	ignoreQuery  bool // fingerprint without the query string
	ignorePath   bool // fingerprint without the path
	ignoreMethod bool // fingerprint without the method
	markAll      bool // marks every answer as a replay, the first one too
	moveLocation bool // a replay's Location is not the stored one
	quotedKeys   bool // "k" and k are two keys
	noRetryAfter bool // a duplicate in flight gets 409 without Retry-After
}

// fake is a small idempotency layer with switchable flaws; without flaws it
// is correct, which the control test proves, so a failing check against a
// flawed fake is the flaw's doing.
type fake struct {
	flaws
	next http.Handler

	mu      sync.Mutex
	records map[string]*record
	windows map[string]*window // checkThenAct: a key's window between read and write
}

// window is the check-then-act flaw's gap between the read that found no
// record for a key and the write: it stays open until a second request for
// the key has made the same read, or for windowMax.
type window struct {
	joined chan struct{}
	closed bool
}

// windowMax bounds the window for a lone request. A concurrent burst closes
// it as soon as its second request arrives, so the flaw shows however the
// machine schedules the burst; a fixed sleep (it was 50 ms) missed it on a
// loaded machine, where the burst arrived spread out wider than the sleep.
const windowMax = 500 * time.Millisecond

type record struct {
	fp     string
	done   bool
	status int
	header http.Header
	body   []byte
}

func newFake(f flaws, next http.Handler) *fake {
	return &fake{flaws: f, next: next, records: map[string]*record{}, windows: map[string]*window{}}
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost && r.Method != http.MethodPatch {
		f.next.ServeHTTP(w, r)
		return
	}
	vs := r.Header.Values("Idempotency-Key")
	if len(vs) == 0 {
		http.Error(w, "key required", http.StatusBadRequest)
		return
	}
	if len(vs) > 1 {
		http.Error(w, "one key", http.StatusBadRequest)
		return
	}
	k := vs[0]
	if !f.quotedKeys {
		k = strings.Trim(k, `"`)
	}
	if k == "" || len(k) > 255 {
		http.Error(w, "bad key", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	if !f.noScope {
		k = r.Header.Get("Authorization") + "\x00" + k
	}
	method, target := r.Method, r.URL.RequestURI()
	switch {
	case f.ignoreMethod:
		method = ""
	case f.ignoreQuery:
		target = r.URL.Path
	case f.ignorePath:
		target = "?" + r.URL.RawQuery
	}
	fp := method + " " + target
	if !f.ignoreBody {
		fp += "\x00" + string(body)
	}

	f.mu.Lock()
	rec, found := f.records[k]
	if f.checkThenAct && !found {
		// The flaw: the decision is made on a read, the write comes later.
		switch w := f.windows[k]; {
		case w == nil:
			w = &window{joined: make(chan struct{})}
			f.windows[k] = w
			f.mu.Unlock()
			select {
			case <-w.joined:
			case <-time.After(windowMax):
			}
			f.mu.Lock()
		case !w.closed:
			w.closed = true
			close(w.joined)
		}
	}
	switch {
	case found && rec.fp != fp:
		f.mu.Unlock()
		http.Error(w, "mismatch", http.StatusUnprocessableEntity)
		return
	case found && !rec.done:
		f.mu.Unlock()
		if !f.noRetryAfter {
			w.Header().Set("Retry-After", "1")
		}
		http.Error(w, "in flight", http.StatusConflict)
		return
	case found:
		f.mu.Unlock()
		for name, v := range rec.header {
			w.Header()[name] = v
		}
		w.Header().Set("Idempotent-Replayed", "true")
		if f.moveLocation {
			w.Header().Set("Location", rec.header.Get("Location")+"/replayed")
		}
		w.WriteHeader(rec.status)
		w.Write(rec.body)
		return
	}
	rec = &record{fp: fp}
	f.records[k] = rec
	f.mu.Unlock()

	rw := httptest.NewRecorder()
	f.next.ServeHTTP(rw, r)
	res := rw.Result()
	f.mu.Lock()
	if res.StatusCode >= 500 && !f.store5xx {
		delete(f.records, k)
	} else {
		rec.done, rec.status, rec.body = true, res.StatusCode, rw.Body.Bytes()
		rec.header = res.Header.Clone()
		if !f.replayCookie {
			rec.header.Del("Set-Cookie")
		}
	}
	f.mu.Unlock()
	for name, v := range res.Header {
		w.Header()[name] = v
	}
	if f.markAll {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.WriteHeader(res.StatusCode)
	w.Write(rw.Body.Bytes())
}

func config(url string) Config {
	return Config{
		URL:            url,
		Path:           "/charges",
		Headers:        []string{"Authorization: Bearer alice"},
		OtherHeaders:   []string{"Authorization: Bearer bob"},
		RequireKey:     true,
		SlowPath:       "/charges?sleep=800ms",
		FailPath:       "/charges?fail=1",
		MismatchQuery:  "a=1",
		MismatchPath:   "/charges/other",
		MismatchMethod: "PATCH",
		Oracle:         "count:/stats#/charges",
		Concurrency:    12,
		Retention:      "24h",
		Rate:           500,
	}
}

func run(t *testing.T, h http.Handler, cfg func(*Config)) *Report {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := config(srv.URL)
	if cfg != nil {
		cfg(&c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := Run(ctx, c, nil)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return rep
}

func verdicts(rep *Report) map[string]Status {
	m := map[string]Status{}
	for _, r := range rep.Results {
		m[r.ID] = r.Status
	}
	return m
}

func dump(t *testing.T, rep *Report) {
	t.Helper()
	var b strings.Builder
	WriteText(&b, rep)
	t.Log("\n" + b.String())
}

// TestIdemPasses: idem's own middleware in front of the naive upstream
// passes every check it can be asked.
func TestIdemPasses(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{
		RequireKey:  true,
		DropHeaders: []string{"Set-Cookie"},
	})
	if err != nil {
		t.Fatal(err)
	}
	rep := run(t, mw.Handler(&Naive{}), nil)
	for id, st := range verdicts(rep) {
		if st != Pass && !(id == "expiry" && st == Skip) { // 24h declared, not waited out
			dump(t, rep)
			t.Fatalf("%s: %s, want PASS", id, st)
		}
	}
	if rep.Failed() {
		t.Fatal("report failed")
	}
}

// TestCorrectFakePasses is the control for the flawed fakes below.
func TestCorrectFakePasses(t *testing.T) {
	t.Parallel()
	rep := run(t, newFake(flaws{}, &Naive{}), nil)
	for id, st := range verdicts(rep) {
		if st != Pass && !(id == "expiry" && st == Skip) { // 24h declared, not waited out
			dump(t, rep)
			t.Fatalf("%s: %s, want PASS", id, st)
		}
	}
}

// TestNaiveUpstream: without any idempotency layer, the duplicates show.
func TestNaiveUpstream(t *testing.T) {
	t.Parallel()
	rep := run(t, &Naive{}, nil)
	v := verdicts(rep)
	for _, id := range []string{"replay-body", "replay-effect", "concurrency", "mismatch-body", "in-flight", "key-required", "key-empty", "key-two-lines"} {
		if v[id] != Fail {
			dump(t, rep)
			t.Errorf("%s: %s, want FAIL", id, v[id])
		}
	}
	if !rep.Failed() {
		t.Fatal("report did not fail")
	}
}

// TestFlawsAreCaught: each flawed fake is caught by the check that names
// its flaw, and only a flaw makes that check fail.
func TestFlawsAreCaught(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		flaws flaws
		check string
		cfg   func(*Config)
	}{
		{"check-then-act", flaws{checkThenAct: true}, "concurrency", nil},
		{"check-then-act/ids", flaws{checkThenAct: true}, "concurrency", func(c *Config) { c.Oracle = "id:/id" }},
		{"check-then-act/bodies", flaws{checkThenAct: true}, "concurrency", func(c *Config) { c.Oracle = "" }},
		{"ignores the body", flaws{ignoreBody: true}, "mismatch-body", nil},
		{"stores 5xx", flaws{store5xx: true}, "failure-policy", nil},
		{"shares keys across credentials", flaws{noScope: true}, "scope-replay", nil},
		{"shares keys across credentials/reveal", flaws{noScope: true}, "scope-reveal", nil},
		{"replays Set-Cookie", flaws{replayCookie: true}, "replay-cookie", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rep := run(t, newFake(tc.flaws, &Naive{}), func(c *Config) {
				c.SlowPath = "" // not this flaw's check: spare the slow request
				if tc.cfg != nil {
					tc.cfg(c)
				}
			})
			if got := verdicts(rep)[tc.check]; got != Fail {
				dump(t, rep)
				t.Fatalf("%s: %s, want FAIL", tc.check, got)
			}
			if !rep.Failed() {
				t.Fatal("report did not fail")
			}
		})
	}
}

// TestStripeModeDeclared: an API that declares it stores failures passes
// when it does, and fails when it does not.
func TestStripeModeDeclared(t *testing.T) {
	t.Parallel()
	declared := func(c *Config) { c.StoresFailures, c.SlowPath = true, "" }
	if got := verdicts(run(t, newFake(flaws{store5xx: true}, &Naive{}), declared))["failure-policy"]; got != Pass {
		t.Fatalf("stores 5xx as declared: %s", got)
	}
	if got := verdicts(run(t, newFake(flaws{}, &Naive{}), declared))["failure-policy"]; got != Fail {
		t.Fatalf("declared but does not store: %s", got)
	}
}

// TestBounded: the request budget holds, and nothing is sent elsewhere.
func TestBounded(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	h := newFake(flaws{}, &Naive{})
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1); h.ServeHTTP(w, r) })
	rep := run(t, counted, func(c *Config) { c.MaxRequests = 12 })
	if rep.Requests > 12 || hits.Load() > 12 {
		t.Fatalf("sent %d (server saw %d), budget 12", rep.Requests, hits.Load())
	}
	if rep.Counts[Skip] == 0 {
		t.Fatal("no check was skipped for the budget")
	}

	for _, bad := range []Config{
		{URL: "ftp://x"}, {URL: "http://u:secret@host"}, {URL: "http://h", Path: "http://elsewhere/x"},
		{URL: "http://h", Oracle: "count:http://elsewhere/stats"}, {URL: "http://h", Headers: []string{"Authorization"}},
	} {
		_, err := Run(context.Background(), bad, nil)
		if err == nil {
			t.Errorf("Run(%+v) accepted", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("error shows a password: %v", err)
		}
	}
}

// TestEndpointMustWork: a wrong path ends the run with ErrEndpoint.
func TestEndpointMustWork(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(&Naive{})
	defer srv.Close()
	c := config(srv.URL)
	c.Path = "/nowhere"
	rep, err := Run(context.Background(), c, nil)
	if err == nil || rep == nil || !rep.Failed() {
		t.Fatalf("Run = %v, %v; want ErrEndpoint and a failed report", rep, err)
	}
}

// TestExpiryWaited: a short declared retention is waited out and checked.
func TestExpiryWaited(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{Retention: time.Second, Lease: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rep := run(t, mw.Handler(&Naive{}), func(c *Config) { c.Retention = "1s" })
	if got := verdicts(rep)["expiry"]; got != Pass {
		dump(t, rep)
		t.Fatalf("expiry: %s", got)
	}
}

// TestOutputs: JSON and HTML carry every result.
func TestOutputs(t *testing.T) {
	t.Parallel()
	rep := run(t, newFake(flaws{ignoreBody: true}, &Naive{}), nil)
	var j bytes.Buffer
	if err := WriteJSON(&j, rep); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(j.Bytes(), &back); err != nil || len(back.Results) != len(rep.Results) {
		t.Fatalf("JSON round trip: %v, %d results", err, len(back.Results))
	}
	var h bytes.Buffer
	if err := WriteHTML(&h, rep); err != nil {
		t.Fatal(err)
	}
	page := h.String()
	if n := strings.Count(page, `<tr class="result"`); n != len(rep.Results) {
		t.Fatalf("HTML has %d result rows, want %d", n, len(rep.Results))
	}
	for _, want := range []string{`data-id="mismatch-body" data-status="FAIL"`, "<svg", "</html>"} {
		if !strings.Contains(page, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") && !strings.Contains(page, rep.Target) {
		t.Error("HTML must be self-contained")
	}
}
