package httpidem

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
)

// TestCrossTenant: the same key from two Authorization headers names two
// independent records, and the refusals each tenant gets have exactly the
// same shape, so a key's use by one tenant cannot be probed by another.
func TestCrossTenant(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	gates := map[string]chan struct{}{"Bearer alice": make(chan struct{}), "Bearer bob": make(chan struct{})}
	started := make(chan string, 2)
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		who := r.Header.Get("Authorization")
		started <- who
		mu.Lock()
		g := gates[who]
		mu.Unlock()
		<-g
		io.WriteString(w, "charged "+who)
	})
	var wg sync.WaitGroup
	results := map[string]*httptest.ResponseRecorder{}
	for _, who := range []string{"Bearer alice", "Bearer bob"} {
		wg.Go(func() {
			w := e.do("POST", "/charges", "shared-key", "amount=1", "Authorization", who)
			mu.Lock()
			results[who] = w
			mu.Unlock()
		})
	}
	// Both run: bob's identical key did not get alice's 409.
	<-started
	<-started
	inflight := map[string]*httptest.ResponseRecorder{}
	mismatch := map[string]*httptest.ResponseRecorder{}
	for _, who := range []string{"Bearer alice", "Bearer bob"} {
		inflight[who] = e.do("POST", "/charges", "shared-key", "amount=1", "Authorization", who)
		problemOf(t, inflight[who], 409, ProblemInFlight)
		mismatch[who] = e.do("POST", "/charges", "shared-key", "amount=999", "Authorization", who)
		problemOf(t, mismatch[who], 422, ProblemMismatch)
	}
	same := func(a, b *httptest.ResponseRecorder) bool {
		return a.Code == b.Code && bytes.Equal(a.Body.Bytes(), b.Body.Bytes()) &&
			a.Header().Get("Content-Type") == b.Header().Get("Content-Type") && len(a.Header()) == len(b.Header())
	}
	if !same(inflight["Bearer alice"], inflight["Bearer bob"]) || !same(mismatch["Bearer alice"], mismatch["Bearer bob"]) {
		t.Fatalf("refusals differ between tenants:\n%s\n%s\n%s\n%s", inflight["Bearer alice"].Body, inflight["Bearer bob"].Body,
			mismatch["Bearer alice"].Body, mismatch["Bearer bob"].Body)
	}
	close(gates["Bearer alice"])
	close(gates["Bearer bob"])
	wg.Wait()
	for _, who := range []string{"Bearer alice", "Bearer bob"} {
		if results[who].Body.String() != "charged "+who {
			t.Fatalf("%s got %q", who, results[who].Body)
		}
		if w := e.do("POST", "/charges", "shared-key", "amount=1", "Authorization", who); w.Body.String() != "charged "+who || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("%s replay got %q", who, w.Body)
		}
	}
	e.wantCalls(2)
}

// TestClientDisconnectResultStillStored: the client gives up mid-request;
// the handler finishes, its result is stored with a context the client
// could not cancel, and the retry replays it (Fiber #4560).
func TestClientDisconnectResultStillStored(t *testing.T) {
	t.Parallel()
	clientGone := make(chan struct{})
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // the client went away …
		close(clientGone)
		w.WriteHeader(http.StatusCreated) // … the work completes anyway
		io.WriteString(w, "charged")
	})
	srv := httptest.NewServer(e.h)
	defer srv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	r, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/charges", strings.NewReader("a"))
	r.Header.Set("Idempotency-Key", "disc")
	r.Header.Set("Authorization", "Bearer test-caller")
	go func() {
		waitFor(t, "the claim", func() bool { rec, err := e.record("", "disc"); return err == nil && rec.State == idem.StateInProgress })
		cancel()
	}()
	if _, err := srv.Client().Do(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	<-clientGone
	waitFor(t, "the completion", func() bool { rec, err := e.record("", "disc"); return err == nil && rec.State == idem.StateCompleted })

	r2, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("a"))
	r2.Header.Set("Idempotency-Key", "disc")
	r2.Header.Set("Authorization", "Bearer test-caller")
	resp, err := srv.Client().Do(r2)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || string(b) != "charged" || resp.Header.Get(ReplayedHeader) != "true" {
		t.Fatalf("retry: %d %q %v", resp.StatusCode, b, resp.Header)
	}
	e.wantCalls(1)
}

const dupes = 200

// TestConcurrentDuplicates: 200 identical requests at once; the handler
// runs once and every other request gets 409.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	var answered atomic.Int64
	allOthers := make(chan struct{})
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		// Hold the claim until every duplicate has been answered.
		select {
		case <-allOthers:
		case <-time.After(30 * time.Second):
		}
		w.WriteHeader(201)
		io.WriteString(w, "once")
	})
	codes := make([]int, dupes)
	var wg sync.WaitGroup
	for i := range dupes {
		wg.Go(func() {
			w := e.do("POST", "/x", "dup", "same")
			codes[i] = w.Code
			if w.Code == 409 && answered.Add(1) == dupes-1 {
				close(allOthers)
			}
		})
	}
	wg.Wait()
	e.wantCalls(1)
	n201, n409 := 0, 0
	for _, c := range codes {
		switch c {
		case 201:
			n201++
		case 409:
			n409++
		}
	}
	if n201 != 1 || n409 != dupes-1 {
		t.Fatalf("%d×201, %d×409 of %d", n201, n409, dupes)
	}
}

// TestConcurrentDuplicatesWaitMode: with WaitTimeout, the duplicates wait
// and all get the first result.
func TestConcurrentDuplicatesWaitMode(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	e := newEnv(t, &Config{WaitTimeout: 30 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		<-release
		w.WriteHeader(201)
		io.WriteString(w, "once")
	})
	type answer struct {
		code     int
		body     string
		replayed bool
	}
	answers := make([]answer, dupes)
	var wg sync.WaitGroup
	for i := range dupes {
		wg.Go(func() {
			w := e.do("POST", "/x", "dup", "same")
			answers[i] = answer{w.Code, w.Body.String(), w.Header().Get(ReplayedHeader) == "true"}
		})
	}
	waitFor(t, "the first request", func() bool { return e.calls.Load() == 1 })
	close(release)
	wg.Wait()
	e.wantCalls(1)
	replays := 0
	for _, a := range answers {
		if a.code != 201 || a.body != "once" {
			t.Fatalf("answer %+v", a)
		}
		if a.replayed {
			replays++
		}
	}
	if replays != dupes-1 {
		t.Fatalf("%d replays, want %d", replays, dupes-1)
	}
}

// TestWaitModeTimesOut: a duplicate that waited WaitTimeout without a
// result gets the 409.
func TestWaitModeTimesOut(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, &Config{WaitTimeout: 100 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
	})
	var wg sync.WaitGroup
	wg.Go(func() { e.do("POST", "/x", "k", "a") })
	<-started
	problemOf(t, e.do("POST", "/x", "k", "a"), 409, ProblemInFlight)
	close(release)
	wg.Wait()
}

// TestLeaseRenewedWhileHandlerRuns: a handler that runs many leases long
// keeps its claim: every duplicate meanwhile gets 409, none takes over.
func TestLeaseRenewedWhileHandlerRuns(t *testing.T) {
	t.Parallel()
	// A lease long enough that a loaded machine (race detector, load 30)
	// still renews it in time; the probes span three of them.
	const lease = time.Second
	done := make(chan struct{})
	var once sync.Once
	finish := func() { once.Do(func() { close(done) }) }
	var runs atomic.Int32
	e := newEnv(t, &Config{Lease: lease}, func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 { // a second run (the lease lost) must fail the test, not hang it
			<-done
		}
		io.WriteString(w, "slow")
	})
	t.Cleanup(finish) // runs before newEnv's: a failed probe must not leave the handler blocked
	var wg sync.WaitGroup
	wg.Go(func() { e.do("POST", "/x", "k", "a") })
	waitFor(t, "the claim", func() bool { return e.calls.Load() == 1 })
	// Probe for ~3 leases.
	for end := time.Now().Add(3 * lease); time.Now().Before(end); time.Sleep(lease / 5) {
		problemOf(t, e.do("POST", "/x", "k", "a"), 409, ProblemInFlight)
	}
	finish()
	wg.Wait()
	if w := e.do("POST", "/x", "k", "a"); w.Body.String() != "slow" || w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("after: %d %s", w.Code, w.Body)
	}
	e.wantCalls(1)
}

// TestLeaseLostCancelsHandlerAnd503: when the store says the lease is
// gone, the handler's context is cancelled with idem.ErrLeaseLost and its
// result is not sent as a success.
func TestLeaseLostCancelsHandlerAnd503(t *testing.T) {
	t.Parallel()
	var cause error
	e := newEnvStore(t, func(s idem.Store) idem.Store {
		return &faultyStore{Store: s, extend: idem.ErrLeaseLost, complete: idem.ErrLeaseLost}
	}, &Config{Lease: 30 * time.Millisecond}, func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done()
		cause = context.Cause(r.Context())
		io.WriteString(w, "too late")
	})
	problemOf(t, e.do("POST", "/x", "k", "a"), 503, ProblemNotStored)
	if !errors.Is(cause, idem.ErrLeaseLost) {
		t.Fatalf("handler context cause %v", cause)
	}
}

// TestFlushAbsorbed: nothing reaches the client before the record is
// stored, even when the handler flushes.
func TestFlushAbsorbed(t *testing.T) {
	t.Parallel()
	outer := httptest.NewRecorder()
	var e *env
	e = newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part 1 ")
		if err := http.NewResponseController(w).Flush(); err != nil {
			t.Errorf("Flush: %v", err)
		}
		w.(http.Flusher).Flush()
		if outer.Flushed || outer.Body.Len() > 0 {
			t.Error("a flush reached the client before the record was stored")
		}
		if rec, _ := e.record("", "k"); rec.State != idem.StateInProgress {
			t.Errorf("state %v while the handler runs", rec.State)
		}
		io.WriteString(w, "part 2")
	})
	e.h.ServeHTTP(outer, req("POST", "/x", "k", "a"))
	if outer.Body.String() != "part 1 part 2" {
		t.Fatalf("body %q", outer.Body)
	}
	if w := e.do("POST", "/x", "k", "a"); w.Body.String() != "part 1 part 2" {
		t.Fatalf("replay %q", w.Body)
	}
}

func TestHijackRefused(t *testing.T) {
	t.Parallel()
	var herr error
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		_, _, herr = http.NewResponseController(w).Hijack()
		http.Error(w, "cannot upgrade", http.StatusInternalServerError)
	})
	e.do("POST", "/x", "k", "a")
	if !errors.Is(herr, ErrHijackProtected) {
		t.Fatalf("Hijack: %v", herr)
	}
	// GET is not protected: the real writer is used.
	srv := httptest.NewServer(e.mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("unprotected hijack: %v", err)
			return
		}
		io.WriteString(c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
		c.Close()
	})))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil || resp.StatusCode != 204 {
		t.Fatalf("unprotected hijack: %v %v", resp, err)
	}
	resp.Body.Close()
}

// TestLargeResponseNotReplayable: past MaxResponse the record is completed
// as not replayable before the first byte is streamed; the first client
// gets everything; retries get 409 and never run the handler again.
func TestLargeResponseNotReplayable(t *testing.T) {
	t.Parallel()
	outer := httptest.NewRecorder()
	var e *env
	e = newEnv(t, &Config{MaxResponse: 1024}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/csv")
		w.WriteHeader(http.StatusCreated)
		chunk := bytes.Repeat([]byte("x"), 1000)
		w.Write(chunk)
		if outer.Body.Len() > 0 {
			t.Error("sent before the limit")
		}
		w.Write(chunk) // past the limit
		rec, _ := e.record("", "big")
		if rec.State != idem.StateCompleted {
			t.Errorf("state %v when the response started streaming", rec.State)
		}
		if !outer.Flushed && outer.Body.Len() != 2000 {
			t.Errorf("streamed %d bytes", outer.Body.Len())
		}
		http.NewResponseController(w).Flush()
		if !outer.Flushed {
			t.Error("Flush does not reach the client while streaming")
		}
		w.Write(chunk)
	})
	e.h.ServeHTTP(outer, req("POST", "/export", "big", "a"))
	if outer.Code != 201 || outer.Body.Len() != 3000 || outer.Header().Get("Content-Type") != "text/csv" {
		t.Fatalf("first: %d %d bytes %v", outer.Code, outer.Body.Len(), outer.Header())
	}
	p := problemOf(t, e.do("POST", "/export", "big", "a"), 410, ProblemNotReplayable)
	if p.OriginalStatus != 201 {
		t.Fatalf("original_status %d", p.OriginalStatus)
	}
	e.wantCalls(1)

	// A large 5xx streams without a marker and releases the claim.
	e2 := newEnv(t, &Config{MaxResponse: 10}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(502)
		io.WriteString(w, strings.Repeat("e", 100))
	})
	for range 2 {
		if w := e2.do("POST", "/x", "k", "a"); w.Code != 502 || w.Body.Len() != 100 {
			t.Fatalf("large 5xx: %d %d", w.Code, w.Body.Len())
		}
	}
	e2.wantCalls(2)
}

// TestStoreResultLimitBelowMaxResponse: a store that refuses the encoded
// response (ErrResultTooLarge) gets the marker instead; protection stays.
func TestStoreResultLimitBelowMaxResponse(t *testing.T) {
	t.Parallel()
	e := newEnvStore(t, func(s idem.Store) idem.Store {
		return &faultyStore{Store: s, completeFn: func(_ idem.Owner, res []byte) error {
			if len(res) > 500 {
				return idem.ErrResultTooLarge
			}
			return nil
		}}
	}, nil, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, strings.Repeat("y", 1000)) })
	if w := e.do("POST", "/x", "k", "a"); w.Code != 200 || w.Body.Len() != 1000 {
		t.Fatalf("first: %d %d", w.Code, w.Body.Len())
	}
	problemOf(t, e.do("POST", "/x", "k", "a"), 410, ProblemNotReplayable)
	e.wantCalls(1)
}

func TestMarkerStoreFailure503(t *testing.T) {
	t.Parallel()
	e := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, complete: errDown} },
		&Config{MaxResponse: 10}, func(w http.ResponseWriter, r *http.Request) {
			if _, err := io.WriteString(w, strings.Repeat("z", 100)); err == nil {
				t.Error("Write succeeded although the marker was not stored")
			}
		})
	w := e.do("POST", "/x", "k", "a")
	problemOf(t, w, 503, ProblemNotStored)
}

// TestDecisionLog: one line per decision, with the hashed key and the
// outcome, and never the raw key.
func TestDecisionLog(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	var mu sync.Mutex
	logger := slog.New(slog.NewJSONHandler(lockedWriter{&mu, &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, &Config{Logger: logger}, nil)
	const raw = "secret-raw-key-4242"
	e.do("POST", "/x", raw, "a", "Authorization", "Bearer t")
	e.do("POST", "/x", raw, "a", "Authorization", "Bearer t")
	e.do("POST", "/x", raw, "b", "Authorization", "Bearer t")
	mu.Lock()
	out := buf.String()
	mu.Unlock()
	if strings.Contains(out, raw) || strings.Contains(out, "Bearer") {
		t.Fatalf("the log leaks the raw key or credentials:\n%s", out)
	}
	scope, _ := HeaderScope("Authorization")(req("POST", "/", "", "", "Authorization", "Bearer t"))
	hashed := idem.MustKey(scope, raw).String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	want := []string{"executed", "replayed", "mismatch"}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), out)
	}
	for i, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["outcome"] != want[i] || rec["key"] != hashed {
			t.Fatalf("line %d: %v, want outcome %s key %s", i, rec, want[i], hashed)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestHeaderScope(t *testing.T) {
	t.Parallel()
	f := HeaderScope("Authorization", "X-Tenant")
	s := func(kv ...string) string {
		v, err := f(anonReq("POST", "/", "", "", kv...))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if s() != "" {
		t.Fatal("no headers: want the empty scope")
	}
	a, b := s("Authorization", "x"), s("Authorization", "y")
	if a == "" || a == b || a != s("Authorization", "x") {
		t.Fatal("scope is not a function of the header")
	}
	if s("Authorization", "x", "X-Tenant", "1") == s("Authorization", "x1") || s("X-Tenant", "x") == a {
		t.Fatal("header boundaries or names do not count")
	}
	if strings.Contains(a, "x") && len(a) < 10 {
		t.Fatal("scope is not hashed")
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	s := newEnv(t, nil, nil).store
	for name, c := range map[string]*Config{
		"MaxBody":             {MaxBody: -1},
		"MaxResponse":         {MaxResponse: -1},
		"Lease":               {Lease: time.Microsecond},
		"Retention":           {Lease: time.Hour, Retention: time.Minute},
		"WaitTimeout":         {WaitTimeout: -1},
		"StoreTimeout":        {StoreTimeout: -1},
		"UnknownOutcome":      {UnknownOutcome: 9},
		"InFlightRetryAfter":  {InFlightRetryAfter: -1},
		"Header":              {Header: "Bad Header"},
		"Methods":             {Methods: []string{"PO ST"}},
		"AtMostOnce":          {AtMostOnce: true, UnknownOutcome: ReleaseUnknown},
		"FingerprintPointers": {FingerprintPointers: []string{"amount"}},
		"KeyPointer":          {KeyPointer: "id"},
		"KeepHeaders":         {KeepHeaders: []string{"a b"}},
		"DropHeaders":         {DropHeaders: []string{"a:b"}},
		"StoreRetryAfter":     {StoreRetryAfter: -time.Second},
	} {
		_, err := New(s, c)
		configtest.Want(t, err, "httpidem", "Config."+name)
	}
	_, err := New(nil, nil)
	configtest.Want(t, err, "httpidem", "store")
	_, err = ResolveURL("ftp://x", nil, nil)
	configtest.Want(t, err, "httpidem", "target")
	if _, err := New(s, nil); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestCustomHeaderAndScopeError(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{Header: "X-Request-Key", ScopeFunc: func(r *http.Request) (string, error) {
		if r.Header.Get("X-Tenant") == "" {
			return "", errors.New("no tenant")
		}
		return r.Header.Get("X-Tenant"), nil
	}}, nil)
	problemOf(t, e.do("POST", "/x", "", "a", "X-Request-Key", "k"), 400, ProblemScope)
	e.do("POST", "/x", "", "a", "X-Request-Key", "k", "X-Tenant", "t1")
	if w := e.do("POST", "/x", "", "a", "X-Request-Key", "k", "X-Tenant", "t1"); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatal("custom header not used")
	}
	e.wantCalls(1)
}
