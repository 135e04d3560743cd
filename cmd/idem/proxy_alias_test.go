package main

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestProxyDropsDifferentAliasKey: through the real proxy binary, a
// client's X-Idempotency-Key beside a different Idempotency-Key never
// reaches the service (which might deduplicate on it, a key the proxy did
// not protect); the same key in both, or the alias alone, is forwarded.
func TestProxyDropsDifferentAliasKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen [][]string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Values("X-Idempotency-Key"))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "--upstream", up.URL, "--store", "memory:")
	for _, c := range []struct {
		key, alias string
		want       []string
	}{
		{"alias-1", "other-key", nil},
		{"alias-2", `"alias-2"`, []string{`"alias-2"`}},
		{"", "only-alias", []string{"only-alias"}},
	} {
		mu.Lock()
		seen = nil
		mu.Unlock()
		if a := post(t, p.url, c.key, "x", "X-Idempotency-Key", c.alias); a.status != http.StatusCreated {
			t.Fatalf("key %q alias %q: %d %s", c.key, c.alias, a.status, a.body)
		}
		mu.Lock()
		got := seen
		mu.Unlock()
		if len(got) != 1 || len(got[0]) != len(c.want) || (len(c.want) == 1 && got[0][0] != c.want[0]) {
			t.Errorf("key %q alias %q: the service saw X-Idempotency-Key %q, want %q", c.key, c.alias, got, c.want)
		}
	}
}

// TestProxyEdges: through the real proxy binary, an empty or
// white-space-only Authorization is no caller (400 scope-required, nothing
// forwarded); with --json-fingerprint, bodies without a canonical form
// (trailing bytes, lone surrogates, invalid UTF-8) are not the request
// they resemble (422, not a replay); a stored gzip answer is decoded for a
// retry that did not ask for gzip.
func TestProxyEdges(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	calls := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		mu.Unlock()
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			io.WriteString(zw, "charged")
			zw.Close()
			return
		}
		io.WriteString(w, "charged")
	}))
	t.Cleanup(up.Close)
	p := startProxy(t, "--upstream", up.URL, "--store", "memory:", "--json-fingerprint")
	raw := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	send := func(key, body string, hdr map[string][]string) (*http.Response, string) {
		t.Helper()
		r, _ := http.NewRequest("POST", p.url+"/charges", strings.NewReader(body))
		r.Header.Set("Idempotency-Key", key)
		r.Header.Set("Authorization", "Bearer test-caller")
		for k, vs := range hdr {
			r.Header[k] = vs
		}
		resp, err := raw.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, auth := range [][]string{{""}, {"   "}, {"", " "}} {
		if resp, b := send("anon-1", "x", map[string][]string{"Authorization": auth}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(b, "scope-required") {
			t.Errorf("Authorization %q: %d %s, want 400 scope-required", auth, resp.StatusCode, b)
		}
	}
	mu.Lock()
	if calls != 0 {
		t.Fatalf("%d anonymous requests reached the service", calls)
	}
	mu.Unlock()

	for i, pair := range [][2]string{
		{`{"amount":1}`, `{"amount":1},{"amount":5000}`},
		{`{"amount":1}`, `{"amount":1}}`},
		{`{"to":"\ufffd"}`, `{"to":"\ud800"}`},
		{`{"to":"\udc00"}`, `{"to":"\ud800"}`},
		{"\"Ren\xe9\"", "\"Ren\xe8\""},
	} {
		key := "fp-" + strconv.Itoa(i)
		if resp, b := send(key, pair[0], nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("%q: %d %s", pair[0], resp.StatusCode, b)
		}
		if resp, b := send(key, pair[1], nil); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%q after %q: %d %s, want 422", pair[1], pair[0], resp.StatusCode, b)
		}
	}

	if resp, _ := send("enc-1", "x", map[string][]string{"Accept-Encoding": {"gzip"}}); resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("first answer not compressed: %v", resp.Header)
	}
	if resp, b := send("enc-1", "x", nil); resp.Header.Get("Idempotent-Replayed") != "true" || resp.Header.Get("Content-Encoding") != "" || b != "charged" {
		t.Errorf("retry without Accept-Encoding: %v %q, want the identity form replayed", resp.Header, b)
	}
}
