package main

import (
	"net/http"
	"net/http/httptest"
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
