package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

const testAdminToken = "s3cret-admin-token-0123"

// lossyUpstream closes the connection without an answer the first time it
// sees a key (the proxy then holds the key), and answers 201 after.
func lossyUpstream(t *testing.T) (*httptest.Server, func(key string) int) {
	var mu sync.Mutex
	seen := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		mu.Lock()
		seen[key]++
		n := seen[key]
		mu.Unlock()
		if n == 1 {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ran again")
	}))
	t.Cleanup(up.Close)
	return up, func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return seen[key] // the key as the client sent it
	}
}

// proxyDigest is the digest under which the proxy keeps key for send's
// caller.
func proxyDigest(t *testing.T, key string) string {
	r := httptest.NewRequest("POST", "/", nil)
	r.Header.Set("Authorization", "Bearer test-caller")
	scope, err := proxyScopeFunc(nil, false)(r)
	if err != nil {
		t.Fatal(err)
	}
	return idem.MustKey(scope, key).Digest().String()
}

// The operations page, in headless Chromium, driving a real proxy: list
// the held keys, open one, resolve it with the service's answer after the
// confirmation step, and see the retry replay that answer; release
// another and see its retry run. A key held in a step (issue 38), whose
// name is HTML, shows "held in step" and the name as text.
func TestAdminOpsPageInChromium(t *testing.T) {
	t.Parallel()
	up, calls := lossyUpstream(t)
	dsn := sqliteDSN(t)
	p := startProxy(t, "--upstream", up.URL, "--store", dsn, "--admin", "127.0.0.1:0", "--admin-token", testAdminToken)
	for _, k := range []string{"k1", "k2"} {
		if a := post(t, p.url, k, "x"); a.status != http.StatusBadGateway {
			t.Fatalf("%s: first answer %+v", k, a)
		}
	}
	stepKey := idem.MustKey("svc", "order-9")
	holdInStep(t, openDSN(t, dsn), stepKey, hostileStep, "reserve")
	const injected = `document.querySelectorAll("#keys b, #detail b, #confirm-box b").length`
	b := startChromium(t)
	b.navigate(p.admin + "/ops")
	b.waitFor("three held keys listed", `document.querySelectorAll("#keys tbody tr.held").length === 3`)
	if got := b.text("#keys tbody"); !strings.Contains(got, "POST /charges") || !strings.Contains(got, "held in step charge<b>x</b>") {
		t.Fatalf("listed rows lack the request line or the step:\n%s", got)
	}
	if got := string(b.eval(injected)); got != "0" {
		t.Fatalf("the step name was rendered as HTML: %s elements", got)
	}
	// The request filter.
	b.eval(`document.getElementById("request").value = "GET /nothing"; document.getElementById("refresh").click()`)
	b.waitFor("the filter to apply", `document.getElementById("list-status").innerText === "0 keys"`)
	b.eval(`document.getElementById("request").value = "POST /charges"; document.getElementById("refresh").click()`)
	b.waitFor("the filter to apply", `document.getElementById("list-status").innerText === "2 keys"`)

	b.eval(fmt.Sprintf(`const t = document.getElementById("token"); t.value = %s; t.dispatchEvent(new Event("change"))`, jsString(testAdminToken)))
	openDigest := func(digest string) {
		b.eval(fmt.Sprintf(`document.querySelector('tr[data-digest=%s] button.open').click()`, jsString(digest)))
		b.waitFor("the record to open", fmt.Sprintf(`document.getElementById("detail-digest").innerText === %s && !document.getElementById("resolve-form").hidden`, jsString(digest)))
	}
	open := func(key string) { openDigest(proxyDigest(t, key)) }

	// The key held in a step (no request line: the filter is cleared):
	// its record and the confirmation name it.
	b.eval(`document.getElementById("request").value = ""; document.getElementById("refresh").click()`)
	b.waitFor("the filter to clear", `document.getElementById("list-status").innerText === "3 keys"`)
	openDigest(stepKey.Digest().String())
	if rec := b.text("#detail-record"); !strings.Contains(rec, "held in step: charge<b>x</b>") || !strings.Contains(rec, "steps done:   reserve") {
		t.Fatalf("opened record of the key held in a step:\n%s", rec)
	}
	b.eval(`document.getElementById("mode-release").click(); document.getElementById("resolve").click()`)
	b.waitFor("the confirmation step", `!document.getElementById("confirm-box").hidden`)
	if c := b.text("#confirm-text"); !strings.Contains(c, "held in step charge<b>x</b>") || !strings.Contains(c, "runs the step again") {
		t.Fatalf("confirmation text %q", c)
	}
	if got := string(b.eval(injected)); got != "0" {
		t.Fatalf("the step name was rendered as HTML: %s elements", got)
	}
	b.eval(`document.getElementById("cancel").click(); document.getElementById("mode-result").click()`)

	// k1: resolve with the service's answer.
	open("k1")
	if rec := b.text("#detail-record"); !strings.Contains(rec, "HTTP 502 (outcome unknown)") || !strings.Contains(rec, "application/problem+json") || !strings.Contains(rec, "request:      POST /charges") {
		t.Fatalf("opened record:\n%s", rec)
	}
	b.eval(`document.getElementById("status").value = "201";
		document.getElementById("headers").value = "Content-Type: application/json";
		document.getElementById("body").value = '{"charge":"ch_1"}';
		document.getElementById("resolve").click()`)
	b.waitFor("the confirmation step", `!document.getElementById("confirm-box").hidden`)
	if c := b.text("#confirm-text"); !strings.Contains(c, "with HTTP 201") {
		t.Fatalf("confirmation text %q", c)
	}
	// Nothing is stored before the confirmation.
	if a := post(t, p.url, "k1", "x"); a.status != http.StatusBadGateway || !a.replayed {
		t.Fatalf("retry before confirming: %+v", a)
	}
	b.eval(`document.getElementById("confirm").click()`)
	b.waitFor("the resolution", `document.getElementById("message").innerText.startsWith("Resolved")`)
	if a := post(t, p.url, "k1", "x"); a.status != http.StatusCreated || !a.replayed || a.body != `{"charge":"ch_1"}` || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("retry after the page resolved k1: %+v", a)
	}

	// k2: release; the retry runs.
	b.eval(`document.getElementById("refresh").click()`)
	b.waitFor("two held keys left", `document.querySelectorAll("#keys tbody tr.held").length === 2`)
	open("k2")
	b.eval(`document.getElementById("mode-release").click(); document.getElementById("resolve").click()`)
	b.waitFor("the confirmation step", `!document.getElementById("confirm-box").hidden`)
	if c := b.text("#confirm-text"); !strings.Contains(c, "Release held key") {
		t.Fatalf("confirmation text %q", c)
	}
	b.eval(`document.getElementById("confirm").click()`)
	b.waitFor("the release", `document.getElementById("message").innerText.startsWith("Released")`)
	if a := post(t, p.url, "k2", "x"); a.status != http.StatusCreated || a.replayed || a.body != "ran again" {
		t.Fatalf("retry after the page released k2: %+v", a)
	}
	if calls("k1") != 1 || calls("k2") != 2 {
		t.Fatalf("upstream calls: k1 %d (want 1), k2 %d (want 2)", calls("k1"), calls("k2"))
	}
	_, metrics := get(t, p.admin+"/metrics")
	for _, want := range []string{`idem_resolutions_total{by="operator",how="release"} 1`, `idem_resolutions_total{by="operator",how="result"} 1`, "idem_held_keys "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// The JSON API's guards: read-only without a token, the token, the
// origin, the content type, the fence, and held keys only.
func TestAdminOpsAPI(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	held := func(id string) idem.Record {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", id)})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Hold(ctx, c.Owner, idem.OutcomeUnknownResult()); err != nil {
			t.Fatal(err)
		}
		rec, _ := s.Get(ctx, idem.MustKey("t", id))
		return rec
	}
	inflight, _ := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", "running")})
	h1, h2 := held("a"), held("b")
	serve := func(token string) *httptest.Server {
		mux := http.NewServeMux()
		(&opsHandler{store: s, token: token, log: slog.New(slog.DiscardHandler)}).register(mux)
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		return srv
	}
	do := func(srv *httptest.Server, d idem.Digest, body string, hdr ...string) (int, string) {
		return postResolve(t, srv.URL, d, body, hdr...)
	}
	release := func(rec idem.Record) string { return fmt.Sprintf(`{"fence":%d,"release":true}`, rec.Fence) }

	ro := serve("")
	if code, body := do(ro, h1.Digest, release(h1)); code != http.StatusForbidden || !strings.Contains(body, "read-only") {
		t.Fatalf("read-only proxy: %d %s", code, body)
	}
	srv := serve(testAdminToken)
	for _, c := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"no token", []string{"Authorization", ""}, http.StatusUnauthorized},
		{"wrong token", []string{"Authorization", "Bearer nope-nope-nope-nope"}, http.StatusUnauthorized},
		{"cross-origin", []string{"Origin", "http://evil.example"}, http.StatusForbidden},
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"same-site fetch", []string{"Sec-Fetch-Site", "same-site"}, http.StatusForbidden},
		{"form post", []string{"Content-Type", "application/x-www-form-urlencoded"}, http.StatusUnsupportedMediaType},
	} {
		if code, body := do(srv, h1.Digest, release(h1), c.hdr...); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if code, body := do(srv, h1.Digest, fmt.Sprintf(`{"fence":%d,"release":true}`, h1.Fence+1)); code != http.StatusConflict {
		t.Errorf("stale fence: %d %s", code, body)
	}
	if code, body := do(srv, inflight.Owner.Key.Digest(), fmt.Sprintf(`{"fence":%d,"release":true}`, inflight.Owner.Fence)); code != http.StatusConflict || !strings.Contains(body, "not held") {
		t.Errorf("in-flight key: %d %s", code, body)
	}
	if rec, _ := s.Get(ctx, idem.MustKey("t", "a")); rec.State != idem.StateHeld {
		t.Fatalf("refused posts changed the record: %v", rec.State)
	}
	// Same origin, token: resolved. A Do key takes the JSON of its value.
	if code, body := do(srv, h1.Digest, fmt.Sprintf(`{"fence":%d,"body":"7"}`, h1.Fence), "Origin", srv.URL, "Sec-Fetch-Site", "same-origin"); code != http.StatusOK || !strings.Contains(body, `"replaced"`) {
		t.Fatalf("resolve: %d %s", code, body)
	}
	if v, err := idem.Do(ctx, s, idem.MustKey("t", "a"), nil, func(context.Context) (int, error) { return 0, nil }); err != nil || v != 7 {
		t.Fatalf("Do after the API resolved = %v, %v", v, err)
	}
	if code, body := do(srv, h2.Digest, release(h2)); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, body)
	}

	// The list: in-flight keys remain, with the filters.
	resp, err := oneShot.Get(srv.URL + "/ops/api/keys?state=waiting")
	if err != nil {
		t.Fatal(err)
	}
	var la listAnswer
	err = json.NewDecoder(resp.Body).Decode(&la)
	resp.Body.Close()
	if err != nil || !la.Writable || la.Count != 1 || la.Keys[0].State != "in_progress" {
		t.Fatalf("list: %+v %v", la, err)
	}
	resp, err = oneShot.Get(srv.URL + "/ops/api/keys?state=waiting&min_age=1h")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&la)
	resp.Body.Close()
	if la.Count != 0 {
		t.Fatalf("min_age filter: %+v", la)
	}
	resp, err = oneShot.Get(srv.URL + "/ops/api/keys?state=bogus")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("bad state: %d", resp.StatusCode)
	}
}

func TestAdminTokenFlagAndEnv(t *testing.T) {
	t.Parallel()
	env := func(vars map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	}
	o, err := parseProxyFlagsEnv([]string{"--upstream", "http://127.0.0.1:1"}, env(map[string]string{"IDEM_ADMIN_TOKEN": testAdminToken}), io.Discard)
	if err != nil || o.adminToken != testAdminToken {
		t.Fatalf("IDEM_ADMIN_TOKEN: %q %v", o.adminToken, err)
	}
	if _, err := parseProxyFlagsEnv([]string{"--upstream", "http://127.0.0.1:1", "--admin-token", "short"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Fatalf("short token: %v", err)
	}
	if _, err := parseProxyFlagsEnv([]string{"--upstream", "http://127.0.0.1:1", "--resolve-url", "ftp://x"}, env(nil), io.Discard); err == nil || !strings.Contains(err.Error(), "--resolve-url") {
		t.Fatalf("bad resolve URL: %v", err)
	}
}
