package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// The cross-caller leak of issue 34 §1, against the built binary and the
// demo service: Alice charges with key k; Bob sends the same key, and the
// service dies before charging him, so Bob's key is held. The resolver
// asks with Bob's Authorization, and the service looks its records up by
// (caller, key): it has none for Bob, so Bob's key is released and his
// retry runs his own charge. Bob never receives Alice's answer.
func TestE2EResolveNeverAnswersAnotherCaller(t *testing.T) {
	t.Parallel()
	startDemoUpstream(t) // builds the binary
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	records := filepath.Join(t.TempDir(), "charges.jsonl")
	p := startProxy(t, "--upstream", "http://"+addr, "--store", sqliteDSN(t), "--resolve-url", "http://"+addr+"/idempotency")
	died := runRecordingUpstream(t, addr, records)
	alice := post(t, p.url, "k", "x", "Authorization", "Bearer alice")
	if alice.status != 201 {
		t.Fatalf("alice: %+v", alice)
	}
	if a := post(t, p.url, "k", "x", "Authorization", "Bearer bob", "X-Upstream-Die", "before"); a.status != 502 || !strings.Contains(a.body, "outcome-unknown") {
		t.Fatalf("bob, the service died before charging: %+v", a)
	}
	<-died
	runRecordingUpstream(t, addr, records)
	var bob answer
	poll(t, "bob's key to be settled", func() bool {
		bob = post(t, p.url, "k", "x", "Authorization", "Bearer bob")
		return bob.status != 502
	})
	if bob.status != 201 || bob.body == alice.body || strings.Contains(bob.body, `"charge":"ch_1"`) {
		t.Fatalf("bob got %+v; alice's answer was %q", bob, alice.body)
	}
	if bob.replayed {
		t.Fatalf("bob's key was answered from a record, not released and run: %+v", bob)
	}
	if !strings.Contains(p.stderr.String(), "outcome=release") {
		t.Errorf("no log line of the release:\n%s", p.stderr)
	}
}

// Only a 2xx answer settles a held key (issue 34 §1), against the built
// binary: a 429, a 401, a plain-text 404 (a wrong --resolve-url path), a
// redirect to another port (never followed: it would carry the caller's
// Authorization there), and a 20 MiB body all leave the key held, every
// question is logged and counted by outcome; a 2xx with Set-Cookie settles
// its key without the cookie.
func TestE2EResolveStoresOnlyA2xx(t *testing.T) {
	t.Parallel()
	// The service loses every answer: the body breaks off.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		panic(http.ErrAbortHandler)
	}))
	defer up.Close()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	defer other.Close()
	var questions sync.Map // key → struct{}
	resolve := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer questions.Store(r.Header.Get("Idempotency-Key"), struct{}{})
		switch r.Header.Get("Idempotency-Key") {
		case "429":
			http.Error(w, "slow down", http.StatusTooManyRequests)
		case "401":
			http.Error(w, "no", http.StatusUnauthorized)
		case "404":
			http.Error(w, "404 page not found", http.StatusNotFound)
		case "302":
			http.Redirect(w, r, other.URL+"/x", http.StatusFound)
		case "huge":
			w.WriteHeader(http.StatusOK)
			w.Write(make([]byte, 20<<20))
		case "ok":
			w.Header().Set("Set-Cookie", "session=someone")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"charge":"ch_9"}`)
		}
	}))
	defer resolve.Close()
	p := startProxy(t, "--upstream", up.URL, "--store", sqliteDSN(t), "--resolve-url", resolve.URL+"/idempotency", "--admin", "127.0.0.1:0", "--log-level", "info")
	refused := []string{"429", "401", "404", "302", "huge"}
	for _, k := range append(refused, "ok") {
		if a := post(t, p.url, k, "x"); a.status != 502 || !strings.Contains(a.body, "outcome-unknown") {
			t.Fatalf("%s: first answer %+v", k, a)
		}
	}
	poll(t, "a question about every key", func() bool {
		n := 0
		questions.Range(func(any, any) bool { n++; return true })
		return n == len(refused)+1
	})
	var ok answer
	poll(t, "the 2xx answer to settle its key", func() bool {
		ok = post(t, p.url, "ok", "x")
		return ok.status != 502
	})
	for _, k := range refused {
		if a := post(t, p.url, k, "x"); a.status != 502 || !a.replayed || !strings.Contains(a.body, "outcome-unknown") {
			t.Errorf("%s: a retry got %d %q, want the held answer", k, a.status, a.body)
		}
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
	// Refused keys are asked again (1 s, 2 s, …): at least one question
	// each.
	poll(t, "every question counted", func() bool {
		_, m := get(t, p.admin+"/metrics")
		var n int
		i := strings.Index(m, `idem_resolve_questions_total{outcome="refused"} `)
		if i >= 0 {
			fmt.Sscan(m[i+len(`idem_resolve_questions_total{outcome="refused"} `):], &n)
		}
		return n >= len(refused) && strings.Contains(m, `idem_resolve_questions_total{outcome="result"} 1`)
	})
	if ok.status != 201 || !ok.replayed || ok.body != `{"charge":"ch_9"}` {
		t.Fatalf("ok: %+v", ok)
	}
	if c := ok.header.Values("Set-Cookie"); len(c) != 0 {
		t.Errorf("the resolved answer replays Set-Cookie %q", c)
	}
	logs := p.stderr.String()
	if n := strings.Count(logs, "asked the service"); n < len(refused)+1 {
		t.Errorf("%d log lines of questions, want at least %d:\n%s", n, len(refused)+1, logs)
	}
}
