package idemclient_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/configtest"
)

func post(t *testing.T, c *http.Client, ctx context.Context, url, body string) (*http.Response, error) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return c.Do(req)
}

// A reply lost after the service acted is retried with the same key and
// answered by the stored response: one effect, reported as a replay.
func TestLostReplyIsReplayed(t *testing.T) {
	t.Parallel()
	s := newService(t)
	s.loseNext.Store(1)
	rec := &recorder{}
	c := newClient(t, &idemclient.Config{Observer: rec, BaseDelay: time.Millisecond})
	resp, err := post(t, c, context.Background(), s.srv.URL+"/charges", "amount=5")
	if err != nil {
		t.Fatal(err)
	}
	key := idemclient.Key(resp)
	if got := readAll(t, resp); resp.StatusCode != 201 || got != "created amount=5" {
		t.Fatalf("answer %d %q", resp.StatusCode, got)
	}
	if !idemclient.Replayed(resp) {
		t.Error("the answer after a lost reply is not reported as a replay")
	}
	if key == "" || s.effectsOf(key) != 1 || len(s.allEffects()) != 1 {
		t.Fatalf("key %q, effects %v", key, s.allEffects())
	}
	at := rec.attempts()
	if len(at) != 2 || at[0].Decision != idemclient.DecisionRetry || at[0].Reason != idemclient.ReasonTransport || at[1].Decision != idemclient.DecisionDone || !at[1].Replayed {
		t.Fatalf("attempts %+v", at)
	}
	if at[0].Key != key || at[1].Key != key {
		t.Fatalf("attempts carry keys %q, %q; want %q", at[0].Key, at[1].Key, key)
	}
}

// Every logical request gets its own key; concurrent requests on one
// Transport, a third of whose answers are lost, each end in success with
// exactly one effect.
func TestConcurrentRequestsOneEffectEach(t *testing.T) {
	t.Parallel()
	s := newService(t)
	s.loseEvery.Store(3)
	budget, err := idemclient.NewBudget(1, 100)
	if err != nil {
		t.Fatal(err)
	}
	c := newClient(t, &idemclient.Config{BaseDelay: time.Millisecond, MaxAttempts: 20, Budget: budget})
	const n = 64
	keys := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			resp, err := post(t, c, context.Background(), s.srv.URL+"/charges", fmt.Sprintf("n=%d", i))
			if err != nil {
				t.Error(err)
				return
			}
			if got := readAll(t, resp); resp.StatusCode != 201 || got != fmt.Sprintf("created n=%d", i) {
				t.Errorf("request %d: %d %q", i, resp.StatusCode, got)
			}
			keys[i] = idemclient.Key(resp)
		})
	}
	wg.Wait()
	eff := s.allEffects()
	if len(eff) != n {
		t.Fatalf("%d keys reached the service, want %d", len(eff), n)
	}
	for i, k := range keys {
		if eff[k] != 1 {
			t.Errorf("request %d (key %q): %d effects", i, k, eff[k])
		}
	}
	if s.requests.Load() <= n {
		t.Fatalf("%d requests for %d operations: no answer was lost, the test proves nothing", s.requests.Load(), n)
	}
}

// An attempt that times out while the first is still running meets 409
// in-flight, waits its Retry-After, and gets the first answer.
func TestInFlightWaitsRetryAfter(t *testing.T) {
	t.Parallel()
	s := newService(t)
	release := make(chan struct{})
	s.handle = func(w http.ResponseWriter, r *http.Request, n int) {
		<-release
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "done")
	}
	rec := &recorder{notify: make(chan idemclient.Event, 16)}
	c := newClient(t, &idemclient.Config{Observer: rec, AttemptTimeout: 200 * time.Millisecond})
	go func() {
		// Let the first attempt finish once a retry met it in flight.
		for e := range rec.notify {
			if e.Kind == idemclient.EventAttempt && e.Reason == idemclient.ReasonInFlight {
				close(release)
				break
			}
		}
		for range rec.notify {
		}
	}()
	resp, err := post(t, c, context.Background(), s.srv.URL+"/x", "b")
	close(rec.notify)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); resp.StatusCode != 201 || got != "done" || !idemclient.Replayed(resp) {
		t.Fatalf("answer %d %q replayed %v", resp.StatusCode, got, idemclient.Replayed(resp))
	}
	var reasons []idemclient.Reason
	var waits []time.Duration
	for _, e := range rec.events {
		if e.Kind == idemclient.EventAttempt {
			reasons = append(reasons, e.Reason)
		} else {
			waits = append(waits, e.Duration)
		}
	}
	if len(reasons) < 3 || reasons[0] != idemclient.ReasonAttemptTimeout || reasons[1] != idemclient.ReasonInFlight {
		t.Fatalf("reasons %v", reasons)
	}
	if waits[1] != time.Second {
		t.Fatalf("the wait after 409 in-flight is %v, want its Retry-After (1s)", waits[1])
	}
	if s.effectsOf(idemclient.Key(resp)) != 1 {
		t.Fatalf("effects %v", s.allEffects())
	}
}

// The answers that are never retried reach the caller after one attempt.
func TestNeverRetried(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 401, 403, 404, 409, 422, 500, 502, 504} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status) // no problem type: a plain answer
				io.WriteString(w, "plain")
			}))
			t.Cleanup(srv.Close)
			cnt := &counting{inner: http.DefaultTransport}
			c := newClient(t, &idemclient.Config{Transport: cnt})
			resp, err := post(t, c, context.Background(), srv.URL, "x")
			if err != nil {
				t.Fatal(err)
			}
			if got := readAll(t, resp); resp.StatusCode != status || got != "plain" || cnt.n.Load() != 1 {
				t.Fatalf("%d %q after %d attempts", resp.StatusCode, got, cnt.n.Load())
			}
		})
	}
}

// The middleware's own refusals (422 key-reused, 400 invalid key) are
// final answers.
func TestMiddlewareRefusalsAreFinal(t *testing.T) {
	t.Parallel()
	s := newService(t)
	rec := &recorder{}
	c := newClient(t, &idemclient.Config{Observer: rec})
	ctx := idemclient.WithKey(context.Background(), "order-1")
	resp, err := post(t, c, ctx, s.srv.URL+"/a", "one")
	if err != nil || resp.StatusCode != 201 {
		t.Fatal(resp, err)
	}
	resp.Body.Close()
	resp, err = post(t, c, ctx, s.srv.URL+"/a", "two") // same key, other body
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 422 || len(rec.attempts()) != 2 {
		t.Fatalf("%d after %d attempts", resp.StatusCode, len(rec.attempts()))
	}
	// A key the caller set in the header itself is sent as it is.
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/a", strings.NewReader("x"))
	req.Header.Set("Idempotency-Key", `"unterminated`)
	resp, err = c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if resp.StatusCode != 400 || len(rec.attempts()) != 3 {
		t.Fatalf("%d after %d attempts", resp.StatusCode, len(rec.attempts()))
	}
}

// outcome-unknown, first and replayed, is the typed error with the key,
// after one attempt.
func TestOutcomeUnknownIsTypedError(t *testing.T) {
	t.Parallel()
	s := newService(t)
	s.handle = func(w http.ResponseWriter, r *http.Request, n int) {
		if !httpidem.OutcomeUnknown(w, context.DeadlineExceeded) {
			t.Error("not a protected request")
		}
	}
	cnt := &counting{inner: http.DefaultTransport}
	c := newClient(t, &idemclient.Config{Transport: cnt})
	ctx := idemclient.WithKey(context.Background(), "order-7")
	for i, replayed := range []bool{false, true} {
		_, err := post(t, c, ctx, s.srv.URL+"/pay", "x")
		var ou *idemclient.OutcomeUnknownError
		if !errors.As(err, &ou) || !errors.Is(err, idemclient.ErrOutcomeUnknown) {
			t.Fatalf("call %d: %v", i, err)
		}
		if ou.Key != "order-7" || ou.Status != 504 || ou.Replayed != replayed || ou.Attempts != 1 {
			t.Fatalf("call %d: %+v", i, ou)
		}
	}
	if cnt.n.Load() != 2 || s.effectsOf("order-7") != 1 {
		t.Fatalf("%d attempts, %d effects", cnt.n.Load(), s.effectsOf("order-7"))
	}
}

// problemServer answers the first n requests with an httpidem problem,
// then 201.
func problemServer(t *testing.T, n int, p httpidem.Problem) (*httptest.Server, *counting) {
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n--
		first := n >= 0
		mu.Unlock()
		if first {
			httpidem.WriteProblem(w, p)
			return
		}
		w.WriteHeader(201)
		io.WriteString(w, r.Header.Get("Idempotency-Key"))
	}))
	t.Cleanup(srv.Close)
	return srv, &counting{inner: http.DefaultTransport}
}

// 429, 503 and 502 upstream-unreachable are retried with the same key,
// after Retry-After.
func TestRetriedAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p      httpidem.Problem
		reason idemclient.Reason
	}{
		{httpidem.Problem{Type: httpidem.ProblemStoreUnavailable, Status: 503, RetryAfter: time.Second}, idemclient.ReasonUnavailable},
		{httpidem.Problem{Type: httpidem.ProblemUpstreamUnreachable, Status: 502, RetryAfter: time.Second}, idemclient.ReasonUpstreamUnreachable},
		{httpidem.Problem{Type: httpidem.ProblemUpstreamUnreachable, Status: 504, RetryAfter: time.Second}, idemclient.ReasonUpstreamUnreachable},
		{httpidem.Problem{Type: "about:blank", Status: 429, RetryAfter: time.Second}, idemclient.ReasonThrottled},
		{httpidem.Problem{Type: "about:blank", Status: 503}, idemclient.ReasonUnavailable},
	} {
		t.Run(fmt.Sprint(tc.p.Status, tc.reason, tc.p.RetryAfter), func(t *testing.T) {
			t.Parallel()
			srv, cnt := problemServer(t, 1, tc.p)
			rec := &recorder{}
			c := newClient(t, &idemclient.Config{Transport: cnt, Observer: rec, BaseDelay: time.Millisecond})
			resp, err := post(t, c, context.Background(), srv.URL, "x")
			if err != nil {
				t.Fatal(err)
			}
			got := readAll(t, resp)
			if resp.StatusCode != 201 || cnt.n.Load() != 2 || got != `"`+idemclient.Key(resp)+`"` {
				t.Fatalf("%d %q after %d attempts", resp.StatusCode, got, cnt.n.Load())
			}
			rec.mu.Lock()
			defer rec.mu.Unlock()
			if e := rec.events[0]; e.Reason != tc.reason || e.Decision != idemclient.DecisionRetry {
				t.Fatalf("first attempt %+v", e)
			}
			if w := rec.events[1].Duration; tc.p.RetryAfter > 0 && w != tc.p.RetryAfter {
				t.Fatalf("waited %v, Retry-After %v", w, tc.p.RetryAfter)
			}
		})
	}
}

// The context deadline wins over Retry-After: no wait that would outlive
// it, and the answer (nothing ran) is returned as it is.
func TestDeadlineWins(t *testing.T) {
	t.Parallel()
	srv, cnt := problemServer(t, 100, httpidem.Problem{Type: httpidem.ProblemStoreUnavailable, Status: 503, RetryAfter: 20 * time.Second})
	rec := &recorder{}
	c := newClient(t, &idemclient.Config{Transport: cnt, Observer: rec})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := post(t, c, ctx, srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	at := rec.attempts()
	if resp.StatusCode != 503 || len(at) != 1 || at[0].Reason != idemclient.ReasonDeadline || at[0].Decision != idemclient.DecisionGiveUp {
		t.Fatalf("%d, attempts %+v", resp.StatusCode, at)
	}
	// Without a deadline, MaxRetryAfter stops it.
	c = newClient(t, &idemclient.Config{Transport: cnt, Observer: rec, MaxRetryAfter: 5 * time.Second})
	resp, err = post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	if at := rec.attempts(); resp.StatusCode != 503 || at[1].Reason != idemclient.ReasonRetryAfter {
		t.Fatalf("%d, attempts %+v", resp.StatusCode, at)
	}
}

// A context that ends while a keyed request may have run is an
// outcome-unknown error that matches the context's error.
func TestCanceledAfterSendIsOutcomeUnknown(t *testing.T) {
	t.Parallel()
	s := newService(t)
	release := make(chan struct{})
	arrived := make(chan struct{})
	s.handle = func(w http.ResponseWriter, r *http.Request, n int) {
		close(arrived)
		<-release
		w.WriteHeader(201)
	}
	defer close(release)
	c := newClient(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-arrived; cancel() }()
	_, err := post(t, c, idemclient.WithKey(ctx, "k1"), s.srv.URL, "x")
	var ou *idemclient.OutcomeUnknownError
	if !errors.As(err, &ou) || !errors.Is(err, context.Canceled) || ou.Key != "k1" {
		t.Fatalf("%v", err)
	}
}

// Attempts and elapsed time are capped; a refused connection never reached
// the service, so the error is a RetryError, not outcome-unknown.
func TestCapsAndRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: every dial is refused
	cnt := &counting{inner: http.DefaultTransport}
	c := newClient(t, &idemclient.Config{Transport: cnt, MaxAttempts: 3, BaseDelay: time.Millisecond})
	_, err = post(t, c, context.Background(), "http://"+addr, "x")
	var re *idemclient.RetryError
	if !errors.As(err, &re) || !errors.Is(err, idemclient.ErrAttemptsExhausted) || errors.Is(err, idemclient.ErrOutcomeUnknown) || re.Attempts != 3 || cnt.n.Load() != 3 {
		t.Fatalf("%v after %d attempts", err, cnt.n.Load())
	}
	c = newClient(t, &idemclient.Config{Transport: cnt, MaxAttempts: 100, BaseDelay: time.Hour, MaxDelay: time.Hour, MaxElapsed: time.Minute})
	// The first backoff is drawn below an hour: almost surely past MaxElapsed.
	for range 10 {
		if _, err = post(t, c, context.Background(), "http://"+addr, "x"); errors.Is(err, idemclient.ErrElapsedExhausted) {
			return
		}
	}
	t.Fatalf("MaxElapsed never stopped the retries: %v", err)
}

// In a total outage, attempts stay within the budget's bound:
// (1 + ratio) × requests + capacity.
func TestBudgetBoundsAmplification(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cnt := &counting{inner: http.DefaultTransport}
	tr, err := idemclient.New(&idemclient.Config{Transport: cnt, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := &http.Client{Transport: tr}
	const requests, workers = 1000, 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	outcomes := map[string]int{}
	for w := range workers {
		wg.Go(func() {
			for range requests / workers {
				_, err := post(t, c, context.Background(), "http://"+addr, fmt.Sprint(w))
				why := "other"
				switch {
				case errors.Is(err, idemclient.ErrBudgetExhausted):
					why = "budget"
				case errors.Is(err, idemclient.ErrAttemptsExhausted):
					why = "attempts"
				}
				mu.Lock()
				outcomes[why]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	n := requests / workers * workers
	bound := (1+idemclient.DefaultBudgetRatio)*float64(n) + idemclient.DefaultBudgetCapacity
	attempts := float64(cnt.n.Load())
	t.Logf("total outage: %d requests, %.0f attempts (%.3f per request), bound %.0f; %v", n, attempts, attempts/float64(n), bound, outcomes)
	if attempts > bound {
		t.Fatalf("%.0f attempts for %d requests, over the budget's bound %.0f", attempts, n, bound)
	}
	if outcomes["other"] != 0 || outcomes["budget"] == 0 {
		t.Fatalf("outcomes %v", outcomes)
	}
}

// A body without GetBody is buffered and sent again, byte for byte (the
// fingerprint matches: a replay, not 422); one over MaxBufferedBody is
// sent once and not retried.
func TestBodyReplay(t *testing.T) {
	t.Parallel()
	s := newService(t)
	c := newClient(t, &idemclient.Config{BaseDelay: time.Millisecond, MaxBufferedBody: 8})
	for _, body := range []string{"12345678", ""} {
		s.loseNext.Store(1)
		req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/b", io.NopCloser(strings.NewReader(body)))
		if req.GetBody != nil {
			t.Fatal("test wants a body without GetBody")
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		key := idemclient.Key(resp)
		if got := readAll(t, resp); got != "created "+body || !idemclient.Replayed(resp) {
			t.Fatalf("%q replayed %v", got, idemclient.Replayed(resp))
		}
		s.mu.Lock()
		bodies := s.bodies[key]
		s.mu.Unlock()
		if len(bodies) != 1 || bodies[0] != body {
			t.Fatalf("service saw %q", bodies)
		}
	}
	s.loseNext.Store(1)
	req, _ := http.NewRequest(http.MethodPost, s.srv.URL+"/b", io.NopCloser(strings.NewReader("123456789")))
	_, err := c.Do(req)
	if !errors.Is(err, idemclient.ErrBodyNotReplayable) || !errors.Is(err, idemclient.ErrOutcomeUnknown) {
		t.Fatalf("%v", err)
	}
	// GetBody: replayed without buffering.
	s.loseNext.Store(1)
	req, _ = http.NewRequest(http.MethodPost, s.srv.URL+"/b", bytes.NewReader(bytes.Repeat([]byte("z"), 100)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if got := readAll(t, resp); len(got) != len("created ")+100 || !idemclient.Replayed(resp) {
		t.Fatalf("%d bytes", len(got))
	}
}

// Methods: POST and PATCH are keyed; PUT and DELETE without a key are sent
// once; GET is retried without a key; a key in the context keys any
// method.
func TestMethods(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string][]string{}
	fail := map[string]bool{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		m := r.Method + r.URL.Path
		seen[m] = append(seen[m], r.Header.Get("Idempotency-Key"))
		again := fail[m]
		fail[m] = !again
		mu.Unlock()
		if !again {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(503)
			return
		}
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, &idemclient.Config{BaseDelay: time.Millisecond})
	for _, m := range []string{"POST", "PATCH", "PUT", "DELETE", "GET", "HEAD"} {
		req, _ := http.NewRequest(m, srv.URL+"/", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	req, _ := http.NewRequestWithContext(idemclient.WithKey(context.Background(), "put-1"), "PUT", srv.URL+"/k", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for m, want := range map[string]int{"POST/": 2, "PATCH/": 2, "PUT/": 1, "PUT/k": 2, "DELETE/": 1, "GET/": 2, "HEAD/": 2} {
		if len(seen[m]) != want {
			t.Errorf("%s: %d attempts %q, want %d", m, len(seen[m]), seen[m], want)
		}
	}
	if k := seen["POST/"]; k[0] == "" || k[0] != k[1] {
		t.Errorf("POST keys %q", k)
	}
	if k := seen["GET/"]; k[0] != "" || seen["PUT/"][0] != "" {
		t.Errorf("GET got a key %q", k)
	}
	if k := seen["PUT/k"]; k[0] != `"put-1"` || k[1] != `"put-1"` {
		t.Errorf("PUT keys %q", k)
	}
}

// Header name and spelling.
func TestHeaderAndSpelling(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		cfg        idemclient.Config
		key, name  string
		want, gotK string
	}{
		{idemclient.Config{}, "a-1", "Idempotency-Key", `"a-1"`, "a-1"},
		{idemclient.Config{Spelling: idemclient.Bare}, "a-1", "Idempotency-Key", `a-1`, "a-1"},
		{idemclient.Config{Header: "x-idempotency-key"}, `q"\`, "X-Idempotency-Key", `"q\"\\"`, `q"\`},
	} {
		c := newClient(t, &tc.cfg)
		req, _ := http.NewRequestWithContext(idemclient.WithKey(context.Background(), tc.key), "POST", srv.URL, nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		h := <-got
		if v := h.Values(tc.name); len(v) != 1 || v[0] != tc.want || idemclient.Key(resp) != tc.gotK {
			t.Errorf("%+v: header %q, Key %q", tc.cfg, v, idemclient.Key(resp))
		}
		if req.Header.Get(tc.name) != "" {
			t.Error("the caller's request was changed")
		}
	}
	c := newClient(t, &idemclient.Config{Spelling: idemclient.Bare})
	for _, bad := range []string{"", "a b", "a,b", strings.Repeat("k", 256), "é"} {
		req, _ := http.NewRequestWithContext(idemclient.WithKey(context.Background(), bad), "POST", srv.URL, nil)
		if _, err := c.Do(req); !errors.Is(err, idemclient.ErrInvalidKey) {
			t.Errorf("key %q: %v", bad, err)
		}
	}
	_, err := idemclient.New(&idemclient.Config{Header: "bad header"}) // a header name with a space
	configtest.Want(t, err, "idemclient", "Config.Header")
}

// The package's copies of httpidem's problem types are httpidem's.
func TestProblemTypesMatchHTTPIdem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p      httpidem.Problem
		status int
		want   func(error) bool
	}{
		{httpidem.Problem{Type: httpidem.ProblemOutcomeUnknown, Status: 502}, 502, func(err error) bool { return errors.Is(err, idemclient.ErrOutcomeUnknown) }},
		{httpidem.Problem{Type: httpidem.ProblemInFlight, Status: 409}, 409, func(err error) bool { return errors.Is(err, idemclient.ErrOutcomeUnknown) }}, // MaxAttempts 1: gives up in flight
		{httpidem.Problem{Type: httpidem.ProblemNotStored, Status: 503}, 503, func(err error) bool { return errors.Is(err, idemclient.ErrOutcomeUnknown) }},
		{httpidem.Problem{Type: httpidem.ProblemUpstreamUnreachable, Status: 502}, 502, func(err error) bool { return err == nil }},
	} {
		srv, cnt := problemServer(t, 1, tc.p)
		c := newClient(t, &idemclient.Config{Transport: cnt, MaxAttempts: 1})
		resp, err := post(t, c, context.Background(), srv.URL, "x")
		if !tc.want(err) {
			t.Errorf("%s: %v", tc.p.Type, err)
		}
		if resp != nil {
			if resp.StatusCode != tc.status {
				t.Errorf("%s: %d", tc.p.Type, resp.StatusCode)
			}
			if b := readAll(t, resp); !strings.Contains(b, tc.p.Type) {
				t.Errorf("the peeked problem body was not put back: %q", b)
			}
		}
	}
}

func TestBudget(t *testing.T) {
	t.Parallel()
	if _, err := idemclient.NewBudget(-1, 10); err == nil {
		t.Error("negative ratio accepted")
	}
	if _, err := idemclient.NewBudget(0.1, 0.5); err == nil {
		t.Error("capacity below 1 accepted")
	}
	b, _ := idemclient.NewBudget(0, 2)
	if b.Tokens() != 2 {
		t.Fatal(b.Tokens())
	}
}

// Parsers: Retry-After values never make a negative or absurd wait, and
// a key survives its spelling.
func FuzzRetryAfter(f *testing.F) {
	for _, s := range []string{"0", "1", "120", "-1", "1.5", "Wed, 21 Oct 2015 07:28:00 GMT", "99999999999999999999", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for i := 0; i < len(v); i++ {
			if v[i] < 0x20 || v[i] > 0x7e {
				t.Skip("not a header value a server can send")
			}
		}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header()["Retry-After"] = []string{v}
			w.WriteHeader(429)
		}))
		defer srv.Close()
		var waits []time.Duration
		c := newClient(t, &idemclient.Config{MaxAttempts: 2, MaxRetryAfter: time.Millisecond, Observer: idemclient.ObserverFunc(func(_ context.Context, e idemclient.Event) {
			if e.Kind == idemclient.EventWait {
				waits = append(waits, e.Duration)
			}
		})})
		resp, err := post(t, c, context.Background(), srv.URL, "x")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, w := range waits {
			if w < 0 || w > time.Millisecond && w > idemclient.DefaultBaseDelay {
				t.Fatalf("Retry-After %q: waited %v", v, w)
			}
		}
	})
}

type idleCloser struct {
	canned
	closed bool
}

func (c *idleCloser) CloseIdleConnections() { c.closed = true }

func TestCloseIdleConnections(t *testing.T) {
	t.Parallel()
	inner := &idleCloser{}
	c := newClient(t, &idemclient.Config{Transport: inner})
	c.CloseIdleConnections()
	if !inner.closed {
		t.Fatal("http.Client.CloseIdleConnections did not reach the wrapped transport")
	}
}

// A Retry-After of all digits that overflows an int64 is a wait too long,
// never ignored (issue 34 §5): the client stops with ReasonRetryAfter
// instead of retrying at once.
func TestRetryAfterOverflowIsTooLong(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header()["Retry-After"] = []string{"99999999999999999999"}
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	rec := &recorder{}
	c := newClient(t, &idemclient.Config{Observer: rec, MaxRetryAfter: time.Minute})
	resp, err := post(t, c, context.Background(), srv.URL, "x")
	if err != nil {
		t.Fatal(err)
	}
	readAll(t, resp)
	at := rec.attempts()
	if resp.StatusCode != 503 || calls.Load() != 1 || len(at) != 1 || at[0].Reason != idemclient.ReasonRetryAfter {
		t.Fatalf("%d after %d calls, attempts %+v", resp.StatusCode, calls.Load(), at)
	}
}
