package main

// The proxy in front of a service that misbehaves the way real services
// do: each test produces the fault on a real TCP connection (a raw
// upstream, or testenv.FaultProxy between the proxy and the service).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
)

// TestE2ENoResendOnReusedConnection: http.Transport resends a request that
// carries Idempotency-Key when a reused connection closes before the
// answer. The service here reads the request, acts, and closes that
// (reused) connection: it must see the request once, and the client gets
// outcome-unknown, with a body and without one (a bodiless request is the
// Transport's other resend case).
func TestE2ENoResendOnReusedConnection(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var mu sync.Mutex
	calls := map[string]int{}
	connOf := map[string][]int{} // key → the connection number of each call
	var wg sync.WaitGroup
	defer wg.Wait()
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					r, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, r.Body)
					id, _ := httpidem.ParseKey(r.Header.Get("Idempotency-Key"))
					mu.Lock()
					calls[id]++
					first := calls[id] == 1
					connOf[id] = append(connOf[id], n)
					mu.Unlock()
					if first && strings.HasPrefix(id, "boom") {
						return // acted; the connection dies before the answer
					}
					fmt.Fprintf(c, "HTTP/1.1 201 Created\r\nContent-Length: %d\r\n\r\n%s", len(id), id)
				}
			})
		}
	}()
	p := startProxy(t, "--upstream", "http://"+ln.Addr().String(), "--store", "memory:")
	for _, tc := range []struct{ warm, boom, body string }{{"warm-1", "boom-body", "amount=1"}, {"warm-2", "boom-empty", ""}} {
		if a := post(t, p.url, tc.warm, tc.body); a.status != 201 {
			t.Fatalf("%s: %+v", tc.warm, a)
		}
		a := post(t, p.url, tc.boom, tc.body)
		if a.status != 502 || !strings.Contains(a.body, "outcome-unknown") {
			t.Fatalf("%s: %+v", tc.boom, a)
		}
		if r := post(t, p.url, tc.boom, tc.body); r.status != 502 || !r.replayed || r.body != a.body {
			t.Fatalf("%s retry: %+v", tc.boom, r)
		}
		mu.Lock()
		n, conns, warm := calls[tc.boom], connOf[tc.boom], connOf[tc.warm]
		mu.Unlock()
		if n != 1 {
			t.Fatalf("%s reached the service %d times (connections %v)", tc.boom, n, conns)
		}
		if conns[0] != warm[0] {
			t.Fatalf("%s came on connection %d, %s on %d: the connection was not reused, the test proves nothing", tc.boom, conns[0], tc.warm, warm[0])
		}
	}
}

// TestE2EUpstreamRefused: the service is down (connection refused): nothing
// was sent, so the claim is released, even with --store-5xx, and the
// client gets 502 upstream-unreachable with Retry-After. Once the service
// is back, the retry runs.
func TestE2EUpstreamRefused(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	fp := testenv.NewFaultProxy(t, up.srv.Listener.Addr().String())
	p := startProxy(t, "--upstream", "http://"+fp.Addr(), "--store", "memory:", "--store-5xx")
	fp.Set(testenv.Refuse)
	a := post(t, p.url, "down", "x")
	if a.status != 502 || !strings.Contains(a.body, "upstream-unreachable") || a.header.Get("Retry-After") == "" || a.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("refused: %+v", a)
	}
	if !strings.Contains(a.body, "retry with the same key") {
		t.Errorf("a keyed request is told to retry with the same key: %s", a.body)
	}
	// A request without a key has no key to retry with.
	if k := post(t, p.url, "", "x"); k.status != 502 || !strings.Contains(k.body, "upstream-unreachable") || strings.Contains(k.body, "key") {
		t.Errorf("keyless request to a dead service: %+v", k)
	}
	fp.Set(testenv.Pass)
	if r := post(t, p.url, "down", "x"); r.status != 201 || r.replayed {
		t.Fatalf("retry once the service is back: %+v", r)
	}
	if c := up.count("down"); c != 1 {
		t.Fatalf("executions %d", c)
	}
}

// TestE2EUpstreamTimeout: the connection to the service is black-holed (or
// its answer is lost on the wire and the connection stalls). Past
// --upstream-timeout the client gets 504 outcome-unknown, the key is no
// longer in flight (the retry replays the 504 at once, not 409), and in
// release mode the retry runs once the service answers again.
func TestE2EUpstreamTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, mode string
		fault      func(*testenv.FaultProxy)
	}{
		{"black hole, hold", "hold", func(fp *testenv.FaultProxy) { fp.Set(testenv.BlackHole) }},
		{"reply lost, hold", "hold", func(fp *testenv.FaultProxy) { fp.DropNextReply() }},
		{"black hole, release", "release", func(fp *testenv.FaultProxy) { fp.Set(testenv.BlackHole) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			up := newUpstream(t)
			fp := testenv.NewFaultProxy(t, up.srv.Listener.Addr().String())
			p := startProxy(t, "--upstream", "http://"+fp.Addr(), "--store", sqliteDSN(t), "--upstream-timeout", "1s", "--unknown-outcome", tc.mode)
			tc.fault(fp)
			a := post(t, p.url, "slow", "x")
			if a.status != 504 || a.replayed || !strings.Contains(a.body, "outcome-unknown") {
				t.Fatalf("timed out: %+v", a)
			}
			fp.Set(testenv.Pass)
			r := post(t, p.url, "slow", "x")
			switch tc.mode {
			case "hold":
				if r.status != 504 || !r.replayed || r.body != a.body {
					t.Fatalf("retry: %+v", r)
				}
			case "release":
				if r.status != 201 || r.replayed {
					t.Fatalf("retry: %+v", r)
				}
			}
		})
	}
}

// TestE2EUpstreamResetMidAnswer: the connection is reset after the status
// line and part of the body (or before any byte of the answer): the outcome
// is unknown, held, and the service is not called again.
func TestE2EUpstreamResetMidAnswer(t *testing.T) {
	t.Parallel()
	for _, cut := range []int{0, 200} {
		t.Run(fmt.Sprint("after ", cut, " bytes"), func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				calls.Add(1)
				io.ReadAll(r.Body)
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, strings.Repeat("receipt ", 500))
			}))
			defer up.Close()
			fp := testenv.NewFaultProxy(t, up.Listener.Addr().String())
			p := startProxy(t, "--upstream", "http://"+fp.Addr(), "--store", "memory:")
			fp.CutNextReply(cut)
			a := post(t, p.url, "cut", "x")
			if a.status != 502 || !strings.Contains(a.body, "outcome-unknown") {
				t.Fatalf("reset: %+v", a)
			}
			if r := post(t, p.url, "cut", "x"); r.status != 502 || !r.replayed || calls.Load() != 1 {
				t.Fatalf("retry %+v after %d calls", r, calls.Load())
			}
		})
	}
}

// TestE2ESigtermBoundedByUpstreamTimeout: SIGTERM while the service hangs
// (black hole): the proxy does not wait for it past --upstream-timeout; it
// stores the outcome-unknown answer, answers the client, and exits 0. A
// new proxy replays that answer.
func TestE2ESigtermBoundedByUpstreamTimeout(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	fp := testenv.NewFaultProxy(t, up.srv.Listener.Addr().String())
	store := sqliteDSN(t)
	args := []string{"--upstream", "http://" + fp.Addr(), "--store", store, "--upstream-timeout", "2s"}
	p := startProxy(t, args...)
	fp.Set(testenv.BlackHole)
	done := make(chan answer, 1)
	go func() { done <- send(context.Background(), p.url, "hung", "x") }()
	poll(t, "the request to reach the black hole", func() bool { return fp.Conns() > 0 })
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit code %d\n%s", code, p.stderr)
	}
	a := <-done
	if a.err != nil || a.status != 504 {
		t.Fatalf("the request in flight: %+v", a)
	}
	fp.Set(testenv.Pass)
	p2 := startProxy(t, args...)
	if r := post(t, p2.url, "hung", "x"); r.status != 504 || !r.replayed {
		t.Fatalf("after restart: %+v", r)
	}
}

// TestE2EForwardedKeyHeaders: the service sees the key as the client sent
// it (issue 34 §5: k arrives as k, not "k"), and never a client's own
// Idempotency-Reexecution.
func TestE2EForwardedKeyHeaders(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:")
	post(t, p.url, `order-1`, "x", "Idempotency-Reexecution", "true")
	post(t, p.url, `"order-2"`, "x", "Authorization", "Bearer other")
	post(t, p.url, `"a\"b"`, "x")
	up.mu.Lock()
	defer up.mu.Unlock()
	want := []string{`order-1`, `"order-2"`, `"a\"b"`}
	if strings.Join(up.rawKeys, " ") != strings.Join(want, " ") {
		t.Fatalf("the service got keys %q, want %q", up.rawKeys, want)
	}
	for i, v := range up.reexec {
		if v != "" {
			t.Fatalf("call %d: Idempotency-Reexecution %q reached the service", i, v)
		}
	}
}
