package httpidem

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestReplayHonoursAcceptEncoding: over a real connection, a response
// that a handler compressed for a first request that asked for gzip is
// replayed compressed only to a retry that accepts gzip; a retry that did
// not ask for it gets the identity form. A coding the middleware cannot
// decode is refused with 406 to a retry that does not accept it.
func TestReplayHonoursAcceptEncoding(t *testing.T) {
	t.Parallel()
	const text = "the charge was created, and this text is long enough to compress"
	e := newEnv(t, nil, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Vary", "Accept-Encoding")
		switch {
		case r.URL.Path == "/br":
			w.Header().Set("Content-Encoding", "br")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, "pretend-brotli")
		case strings.Contains(r.Header.Get("Accept-Encoding"), "gzip"):
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			io.WriteString(zw, text)
			zw.Close()
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(b.Len())) // the compressed length: must go with the encoding
			w.WriteHeader(http.StatusCreated)
			w.Write(b.Bytes())
		default:
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, text)
		}
	})
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}} // decodes nothing
	send := func(path, key, acceptEncoding string) (*http.Response, []byte) {
		r, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader("x"))
		r.Header.Set("Authorization", "Bearer test-caller")
		r.Header.Set("Idempotency-Key", key)
		if acceptEncoding != "" {
			r.Header.Set("Accept-Encoding", acceptEncoding)
		}
		resp, err := raw.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	first, zipped := send("/charges", "enc-1", "gzip")
	if first.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first answer: %v", first.Header)
	}
	for _, ae := range []string{"", "identity", "gzip;q=0", "br", "*;q=0", "deflate, gzip;q=0"} {
		resp, b := send("/charges", "enc-1", ae)
		if resp.Header.Get(ReplayedHeader) != "true" || resp.Header.Get("Content-Encoding") != "" || string(b) != text {
			t.Errorf("Accept-Encoding %q: %d %v %q, want the identity form replayed", ae, resp.StatusCode, resp.Header, b)
		}
	}
	for _, ae := range []string{"gzip", "br, gzip;q=0.5", "*", "x-gzip"} {
		resp, b := send("/charges", "enc-1", ae)
		if resp.Header.Get(ReplayedHeader) != "true" || resp.Header.Get("Content-Encoding") != "gzip" || !bytes.Equal(b, zipped) {
			t.Errorf("Accept-Encoding %q: %v, want the stored gzip bytes", ae, resp.Header)
		}
	}
	send("/br", "enc-2", "br")
	if resp, b := send("/br", "enc-2", "gzip"); resp.StatusCode != http.StatusNotAcceptable || !strings.Contains(string(b), ProblemEncodingNotAccepted) {
		t.Errorf("br to a gzip-only retry: %d %s, want 406 %s", resp.StatusCode, b, ProblemEncodingNotAccepted)
	}
	if resp, b := send("/br", "enc-2", "br"); resp.Header.Get(ReplayedHeader) != "true" || string(b) != "pretend-brotli" {
		t.Errorf("br to a br retry: %d %s", resp.StatusCode, b)
	}
	e.wantCalls(2)
}
