package httpidem

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestSetCookieNotStoredByDefault(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{DropHeaders: []string{"X-Trace"}}, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Add("Set-Cookie", "session=secret")
		w.Header().Set("X-Trace", "t-1")
		w.Header().Set("X-Order", "o-1")
		w.WriteHeader(201)
	})
	first := e.do("POST", "/login", "c", "a")
	if first.Header().Get("Set-Cookie") != "session=secret" || first.Header().Get("X-Trace") != "t-1" {
		t.Fatalf("first response: %v", first.Header())
	}
	again := e.do("POST", "/login", "c", "a")
	if again.Header().Get(ReplayedHeader) != "true" || again.Header().Get("Set-Cookie") != "" || again.Header().Get("X-Trace") != "" || again.Header().Get("X-Order") != "o-1" {
		t.Fatalf("replay: %v", again.Header())
	}
}

// TestTrailersStayTrailers: over a real connection, the first response
// sends the handler's trailers after the body (declared or with
// TrailerPrefix), none of them in the header block; replays carry none.
// Headers set after WriteHeader that are not trailers are ignored, as
// net/http does.
func TestTrailersStayTrailers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.WriteHeader(201)
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "c1")
		w.Header().Set(http.TrailerPrefix+"X-Late", "l1")
		w.Header().Set("X-Not-A-Trailer", "ignored")
	})
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	raw := func() (http.Header, http.Header, string) {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST /x HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-caller\r\nIdempotency-Key: tr\r\nContent-Length: 1\r\n\r\na")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.Header, resp.Trailer, string(b)
	}
	h, tr, body := raw()
	if body != "body" || tr.Get("X-Checksum") != "c1" || tr.Get("X-Late") != "l1" {
		t.Fatalf("first: body %q trailers %v", body, tr)
	}
	for _, k := range []string{"X-Checksum", "X-Late", "X-Not-A-Trailer"} {
		if h.Get(k) != "" {
			t.Fatalf("first: %s in the header block: %v", k, h)
		}
	}
	h, tr, body = raw()
	if body != "body" || h.Get(ReplayedHeader) != "true" || len(tr) != 0 || h.Get("X-Checksum") != "" || h.Get("Trailer") != "" {
		t.Fatalf("replay: header %v trailers %v body %q", h, tr, body)
	}
}

func gz(t *testing.T, s string) []byte {
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	io.WriteString(zw, s)
	zw.Close()
	return b.Bytes()
}

// TestGzipBodyFingerprintedDecoded: a gzip body is fingerprinted on its
// content (the same JSON compressed two ways is one request), the handler
// gets the bytes as sent, a zip bomb is refused with 413 and nothing is
// recorded, and a broken gzip stream is 400.
func TestGzipBodyFingerprintedDecoded(t *testing.T) {
	t.Parallel()
	var got [][]byte
	e := newEnv(t, &Config{MaxBody: 1 << 20}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, b)
		w.WriteHeader(201)
	})
	body := `{"amount":4200,"currency":"EUR"}`
	var fast bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&fast, gzip.BestSpeed)
	io.WriteString(zw, body)
	zw.Close()
	a, b := gz(t, body), fast.Bytes()
	if bytes.Equal(a, b) {
		t.Fatal("the two encodings are the same bytes; the test proves nothing")
	}
	if w := e.do("POST", "/charges", "g", string(a), "Content-Encoding", "gzip"); w.Code != 201 {
		t.Fatalf("first: %d", w.Code)
	}
	if w := e.do("POST", "/charges", "g", string(b), "Content-Encoding", "GZIP"); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("same content, other compression: %d %v", w.Code, w.Header())
	}
	problemOf(t, e.do("POST", "/charges", "g", string(gz(t, `{"amount":9900}`)), "Content-Encoding", "gzip"), 422, ProblemMismatch)
	if len(got) != 1 || !bytes.Equal(got[0], a) {
		t.Fatalf("the handler got %q", got)
	}
	bomb := gz(t, strings.Repeat("0", 8<<20)) // 8 MiB of zeros in a few KiB
	if len(bomb) > 1<<20 {
		t.Fatal("bomb too large to be one")
	}
	problemOf(t, e.do("POST", "/charges", "bomb", string(bomb), "Content-Encoding", "gzip"), 413, ProblemBodyTooLarge)
	if _, err := e.record("", "bomb"); err == nil {
		t.Fatal("a zip bomb left a record")
	}
	problemOf(t, e.do("POST", "/charges", "broken", "not gzip at all", "Content-Encoding", "gzip"), 400, ProblemBodyUnreadable)
	e.wantCalls(1)
}

// TestBodyBufferGrowsWithArrivingBytes: a declared Content-Length does not
// preallocate: the buffer a request costs follows what was sent.
func TestBodyBufferGrowsWithArrivingBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	r := req("POST", "/charges", "big", "")
	r.Body = io.NopCloser(strings.NewReader("x"))
	r.ContentLength = 10 << 20 // declared, never sent
	c := charge{b: NewMemoryBudget(1<<30, 0), ctx: r.Context()}
	defer c.done()
	body, _, p, err := e.mw.readBody(r, &c)
	if p != nil || err != nil || string(body) != "x" {
		t.Fatalf("readBody: %q %v %v", body, p, err)
	}
	if cap(body) > maxBodyPrealloc {
		t.Fatalf("a 1-byte body that declared 10 MiB holds a %d-byte buffer", cap(body))
	}
}
