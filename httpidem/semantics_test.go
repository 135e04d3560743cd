package httpidem

// One test per row of the HTTP semantics table in docs/http.md, named after it.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
)

func TestRowMethodNotProtectedPassesThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	methods := []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete, http.MethodOptions}
	for _, m := range methods {
		for range 2 {
			w := e.do(m, "/x", "k1", "")
			if w.Code != 200 || w.Header().Get(ReplayedHeader) != "" {
				t.Fatalf("%s: got %d %v", m, w.Code, w.Header())
			}
		}
	}
	e.wantCalls(int64(2 * len(methods)))
	if _, err := e.record("", "k1"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("an unprotected method left a record: %v", err)
	}
	// The set is configurable: PUT protected, POST not.
	e2 := newEnv(t, &Config{Methods: []string{"put"}}, nil)
	e2.do("PUT", "/x", "k", "a")
	if w := e2.do("PUT", "/x", "k", "a"); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatal("PUT was not protected")
	}
	e2.do("POST", "/x", "k2", "a")
	e2.do("POST", "/x", "k2", "a")
	e2.wantCalls(3)
}

func TestRowNoKeyKeyRequired400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{RequireKey: true}, nil)
	problemOf(t, e.do("POST", "/charges", "", "a"), 400, ProblemMissingKey)
	e.wantCalls(0)

	// Not required (the default): passes through, unprotected, every time.
	e2 := newEnv(t, nil, nil)
	for range 2 {
		if w := e2.do("POST", "/charges", "", "a"); w.Code != 201 || w.Header().Get(ReplayedHeader) != "" {
			t.Fatalf("keyless request: %d %v", w.Code, w.Header())
		}
	}
	e2.wantCalls(2)
}

func TestRowInvalidKey400(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	for name, key := range map[string]string{
		"empty sf-string": `""`,
		"256 characters":  strings.Repeat("k", 256),
		"space":           `"a b"`,
		"control":         "\"a\x01\"",
		"not ASCII":       "\"caf\xc3\xa9\"",
		"unterminated":    `"abc`,
		"parameters":      `"abc";x=1`,
		"list":            `"a", "b"`,
	} {
		t.Run(name, func(t *testing.T) {
			r := req("POST", "/x", "", "a")
			r.Header["Idempotency-Key"] = []string{key}
			p := problemOf(t, e.serve(r), 400, ProblemInvalidKey)
			if strings.Contains(p.Detail, key) && key != `""` {
				t.Fatalf("detail %q repeats the key", p.Detail)
			}
		})
	}
	r := req("POST", "/x", "", "a")
	r.Header["Idempotency-Key"] = []string{`"a"`, `"a"`}
	problemOf(t, e.serve(r), 400, ProblemMultipleKeys)
	e.wantCalls(0)
}

func TestRowFirstRequestExecutedAndStored(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	w := e.do("POST", "/charges", `"k1"`, "amount=42")
	if w.Code != 201 || w.Body.String() != `{"echo":"amount=42"}` {
		t.Fatalf("first request: %d %s", w.Code, w.Body)
	}
	if w.Header().Get(ReplayedHeader) != "" {
		t.Fatal("a first response carries Idempotent-Replayed")
	}
	rec, err := e.record("", "k1")
	if err != nil || rec.State != idem.StateCompleted {
		t.Fatalf("record %+v, %v; want completed", rec, err)
	}
	stored, err := decodeResponse(rec.Result)
	if err != nil || stored.Status != 201 || string(stored.Body) != `{"echo":"amount=42"}` || stored.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("stored %+v, %v", stored, err)
	}
	e.wantCalls(1)
}

// TestRowRetryReplayedByteForByte compares the raw bytes of the first
// response and of the replay on the wire: they differ only in the Date
// line (the server's) and the added Idempotent-Replayed line.
func TestRowRetryReplayedByteForByte(t *testing.T) {
	t.Parallel()
	body := append([]byte("\x00\x01binary\xff"), bytes.Repeat([]byte("z"), 5000)...)
	e := newEnv(t, &Config{KeepHeaders: []string{"set-cookie"}}, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Set-Cookie", "a=1")
		h.Add("Set-Cookie", "b=2")
		h.Set("X-Order", "o-1")
		h.Set("Connection", "X-Hop")
		h.Set("X-Hop", "never stored")
		h.Set("Cache-Control", "private")
		w.WriteHeader(http.StatusAccepted)
		w.Write(body[:10]) // no Content-Type: sniffed once, stored
		w.Write(body[10:])
	})
	srv := httptest.NewServer(e.h)
	defer srv.Close()

	raw := func() []byte {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /orders HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-caller\r\nIdempotency-Key: \"byte-key\"\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc")
		b, err := io.ReadAll(c)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	strip := func(b []byte) []byte {
		var out bytes.Buffer
		head, rest, _ := bytes.Cut(b, []byte("\r\n\r\n"))
		for line := range strings.SplitSeq(string(head), "\r\n") {
			if strings.HasPrefix(line, "Date: ") || line == "Idempotent-Replayed: true" {
				continue
			}
			out.WriteString(line + "\r\n")
		}
		out.WriteString("\r\n")
		out.Write(rest)
		return out.Bytes()
	}
	first, second := raw(), raw()
	if bytes.Contains(first, []byte("Idempotent-Replayed")) {
		t.Fatal("first response carries Idempotent-Replayed")
	}
	if !bytes.Contains(second, []byte("\r\nIdempotent-Replayed: true\r\n")) {
		t.Fatalf("replay lacks Idempotent-Replayed: %q", second[:200])
	}
	if !bytes.Equal(strip(first), strip(second)) {
		t.Fatalf("replay differs:\nfirst  %q\nreplay %q", strip(first)[:300], strip(second)[:300])
	}
	if bytes.Contains(first, []byte("X-Hop")) {
		t.Fatal("a header named in Connection was sent")
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(second)), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 202 || !bytes.Equal(got, body) || len(resp.Header["Set-Cookie"]) != 2 || resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Fatalf("replay: %d %v (%d bytes)", resp.StatusCode, resp.Header, len(got))
	}
	e.wantCalls(1)
}

func TestRowDifferentRequest422(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	if w := e.do("POST", "/a?x=1", "k", "body"); w.Code != 201 {
		t.Fatal(w.Code)
	}
	for _, r := range map[string]*http.Request{
		"method": req("PATCH", "/a?x=1", "k", "body"),
		"path":   req("POST", "/b?x=1", "k", "body"),
		"query":  req("POST", "/a?x=2", "k", "body"),
		"body":   req("POST", "/a?x=1", "k", "other"),
		"no body": func() *http.Request {
			return req("POST", "/a?x=1", "k", "")
		}(),
	} {
		problemOf(t, e.serve(r), 422, ProblemMismatch)
	}
	e.wantCalls(1)
}

func TestRowInFlight409RetryAfter(t *testing.T) {
	t.Parallel()
	started, release := make(chan struct{}), make(chan struct{})
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		close(started)
		<-release
		io.WriteString(w, "done")
	})
	var first *httptest.ResponseRecorder
	var wg sync.WaitGroup
	wg.Go(func() { first = e.do("POST", "/x", "k", "a") })
	<-started
	w := e.do("POST", "/x", "k", "a")
	problemOf(t, w, 409, ProblemInFlight)
	ra, err := strconv.Atoi(w.Header().Get("Retry-After"))
	if err != nil || ra != 1 { // lease left (30s), capped by InFlightRetryAfter
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
	// A different request with the same key is a mismatch even now.
	problemOf(t, e.do("POST", "/x", "k", "b"), 422, ProblemMismatch)
	close(release)
	wg.Wait()
	if first.Code != 200 || first.Body.String() != "done" {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	if w := e.do("POST", "/x", "k", "a"); w.Header().Get(ReplayedHeader) != "true" || w.Body.String() != "done" {
		t.Fatalf("after completion: %d %v %s", w.Code, w.Header(), w.Body)
	}
	e.wantCalls(1)
}

func TestRowNotStoredStatusesReleaseTheClaim(t *testing.T) {
	t.Parallel()
	for _, status := range []int{500, 502, 503, 408, 425, 429} {
		t.Run(strconv.Itoa(status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				io.WriteString(w, "no")
			})
			for range 2 {
				if w := e.do("POST", "/x", "k", "a"); w.Code != status || w.Header().Get(ReplayedHeader) != "" {
					t.Fatalf("got %d %v", w.Code, w.Header())
				}
			}
			e.wantCalls(2) // the retry ran again
			if rec, err := e.record("", "k"); err != nil || rec.State != idem.StateReleased {
				t.Fatalf("record %+v %v, want released", rec, err)
			}
		})
	}
	t.Run("panic", func(t *testing.T) {
		t.Parallel()
		// Before the handler wrote anything: no result exists, the claim
		// is released and the retry runs. After it started its answer:
		// the outcome is unknown, held by default, released on request.
		for _, tc := range []struct {
			name    string
			cfg     Config
			write   bool
			calls   int64
			replays bool
		}{
			{"before writing", Config{}, false, 2, false},
			{"after writing, hold", Config{}, true, 1, true},
			{"after writing, release", Config{UnknownOutcome: ReleaseUnknown}, true, 2, false},
		} {
			var n int
			e := newEnv(t, &tc.cfg, func(w http.ResponseWriter, r *http.Request) {
				if n++; n == 1 {
					if tc.write {
						io.WriteString(w, "partial")
					}
					panic("boom")
				}
				io.WriteString(w, "ok")
			})
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("the panic was swallowed")
					}
				}()
				e.do("POST", "/x", "k", "a")
			}()
			w := e.do("POST", "/x", "k", "a")
			if tc.replays {
				problemOrReplay(t, w, http.StatusBadGateway, ProblemOutcomeUnknown, true)
				if rec, _ := e.record("", "k"); rec.State != idem.StateHeld {
					t.Fatalf("%s: record %v, want held", tc.name, rec.State)
				}
			} else if w.Code != 200 || w.Body.String() != "ok" || w.Header().Get(ReplayedHeader) != "" {
				t.Fatalf("%s: retry after panic: %d %s", tc.name, w.Code, w.Body)
			}
			e.wantCalls(tc.calls)
		}
	})
	t.Run("stripe mode stores 5xx", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, &Config{StoreStatusFunc: StripeStoreStatus}, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "card processor failed", 500)
		})
		e.do("POST", "/x", "k", "a")
		if w := e.do("POST", "/x", "k", "a"); w.Code != 500 || w.Header().Get(ReplayedHeader) != "true" {
			t.Fatalf("stripe mode: %d %v", w.Code, w.Header())
		}
		e.wantCalls(1)
		// 429 still releases.
		e2 := newEnv(t, &Config{StoreStatusFunc: StripeStoreStatus}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(429) })
		e2.do("POST", "/x", "k", "a")
		e2.do("POST", "/x", "k", "a")
		e2.wantCalls(2)
	})
}

func TestRowBodyOverLimit413NothingRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{MaxBody: 10}, nil)
	problemOf(t, e.do("POST", "/x", "k", strings.Repeat("b", 11)), 413, ProblemBodyTooLarge)
	// Without a Content-Length (chunked), the limit is found while reading.
	r := req("POST", "/x", "k2", "")
	r.Body = io.NopCloser(io.MultiReader(strings.NewReader(strings.Repeat("b", 11))))
	r.ContentLength = -1
	problemOf(t, e.serve(r), 413, ProblemBodyTooLarge)
	for _, k := range []string{"k", "k2"} {
		if _, err := e.record("", k); !errors.Is(err, idem.ErrNotFound) {
			t.Fatalf("%s: a record exists after 413: %v", k, err)
		}
	}
	e.wantCalls(0)
	// Exactly at the limit is fine.
	if w := e.do("POST", "/x", "k", strings.Repeat("b", 10)); w.Code != 201 {
		t.Fatalf("body at the limit: %d", w.Code)
	}
}

func TestRowStoreUnreachable503(t *testing.T) {
	t.Parallel()
	e := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, begin: errDown} }, nil, nil)
	w := e.do("POST", "/x", "k", "a")
	problemOf(t, w, 503, ProblemStoreUnavailable)
	if w.Header().Get("Retry-After") != "1" {
		t.Fatalf("Retry-After %q", w.Header().Get("Retry-After"))
	}
	e.wantCalls(0)

	// FailOpen runs the handler unprotected instead.
	e2 := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, begin: errDown} }, &Config{FailOpen: true}, nil)
	if w := e2.do("POST", "/x", "k", "a"); w.Code != 201 {
		t.Fatalf("fail open: %d", w.Code)
	}
	e2.wantCalls(1)
}

// TestCompleteFails503 covers DESIGN's rule: a result reaches the caller
// only after Complete made it durable.
func TestCompleteFails503(t *testing.T) {
	t.Parallel()
	e := newEnvStore(t, func(s idem.Store) idem.Store { return &faultyStore{Store: s, complete: errDown} }, nil, nil)
	w := e.do("POST", "/x", "k", "a")
	problemOf(t, w, 503, ProblemNotStored)
	if strings.Contains(w.Body.String(), "echo") {
		t.Fatal("the unstored result leaked to the client")
	}
	// The claim is kept (in progress) until its lease runs out.
	if rec, _ := e.record("", "k"); rec.State != idem.StateInProgress {
		t.Fatalf("record state %v", rec.State)
	}
}

func TestHandlerReceivesBodyIntact(t *testing.T) {
	t.Parallel()
	body := strings.Repeat("0123456789", 1000)
	var got []byte
	var cl int64
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		cl = r.ContentLength
		rb, _ := r.GetBody()
		again, _ := io.ReadAll(rb)
		if !bytes.Equal(again, got) {
			t.Error("GetBody returned another body")
		}
	})
	e.do("POST", "/x", "k", body)
	if string(got) != body || cl != int64(len(body)) {
		t.Fatalf("handler got %d bytes (ContentLength %d), want %d", len(got), cl, len(body))
	}
}

func TestOwnerAndFenceInContext(t *testing.T) {
	t.Parallel()
	var fence uint64
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) { fence = idem.FenceFromContext(r.Context()) })
	e.do("POST", "/x", "k", "a")
	rec, _ := e.record("", "k")
	if fence == 0 || fence != rec.Fence {
		t.Fatalf("fence in context %d, record %d", fence, rec.Fence)
	}
}

func TestJSONFingerprint(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{JSONFingerprint: true}, nil)
	e.do("POST", "/x", "k", `{"a":1,"b":[1,2]}`)
	if w := e.do("POST", "/x", "k", "{ \"b\": [1, 2],\n \"a\": 1 }"); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("reordered JSON: %d", w.Code)
	}
	problemOf(t, e.do("POST", "/x", "k", `{"a":2,"b":[1,2]}`), 422, ProblemMismatch)
	// A body that is not JSON is fingerprinted as sent.
	e.do("POST", "/y", "k2", `not json`)
	if w := e.do("POST", "/y", "k2", `not json`); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatal("non-JSON body not replayed")
	}
	problemOf(t, e.do("POST", "/y", "k2", `not  json`), 422, ProblemMismatch)
	e.wantCalls(2)
	// Without the mode, reordering is another request.
	e2 := newEnv(t, nil, nil)
	e2.do("POST", "/x", "k", `{"a":1,"b":2}`)
	problemOf(t, e2.do("POST", "/x", "k", `{"b":2,"a":1}`), 422, ProblemMismatch)
}

func TestDropHeaders(t *testing.T) {
	t.Parallel()
	n := 0
	e := newEnv(t, &Config{DropHeaders: []string{"x-request-id"}}, func(w http.ResponseWriter, r *http.Request) {
		n++
		w.Header().Set("X-Request-Id", "req-"+strconv.Itoa(n))
		w.Header().Set("X-Kept", "yes")
	})
	first := e.do("POST", "/x", "k", "a")
	replay := e.do("POST", "/x", "k", "a")
	if first.Header().Get("X-Request-Id") != "req-1" || replay.Header().Get("X-Request-Id") != "" || replay.Header().Get("X-Kept") != "yes" {
		t.Fatalf("first %v, replay %v", first.Header(), replay.Header())
	}
}

func TestContextCancelledWhileWaitingForBegin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := req("POST", "/x", "k", "a").WithContext(ctx)
	w := e.serve(r)
	// memstore honours the cancelled context: nothing ran, nothing stored.
	if w.Code != 503 {
		t.Fatalf("got %d", w.Code)
	}
	e.wantCalls(0)
}
