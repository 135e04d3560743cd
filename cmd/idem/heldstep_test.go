package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/step"
)

// hostileStep is a step name a service could have chosen: HTML, a
// terminal escape, a NUL and a newline. Every surface must show it as
// text.
const hostileStep = "charge<b>x</b>\x1b[31m\x00\n"

// openDSN opens the store dsn names, closed when the test ends.
func openDSN(t *testing.T, dsn string) idem.Store {
	t.Helper()
	d, err := storeurl.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	h, err := storeurl.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h.Store
}

// postResolve posts body to the resolve route of digest on the operations
// API at base, as the admin (hdr: headers to set or, empty, to remove).
func postResolve(t *testing.T, base string, digest idem.Digest, body string, hdr ...string) (int, string) {
	t.Helper()
	r, _ := http.NewRequest("POST", base+"/ops/api/keys/"+digest.String()+"/resolve", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer "+testAdminToken)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := oneShot.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// holdInStep holds key in step name after the steps done finished, as
// step.Do does when its process dies inside a HoldUnknown step (here: a
// panic inside it, which holds at once).
func holdInStep(t *testing.T, s idem.Store, key idem.Key, name string, done ...string) idem.Record {
	t.Helper()
	ss, ok := s.(step.Store)
	if !ok {
		t.Fatalf("%T keeps no steps", s)
	}
	func() {
		defer func() { _ = recover() }()
		_, _ = step.Do(context.Background(), ss, key, nil, func(ctx context.Context, op *step.Op) (int, error) {
			for _, d := range done {
				if _, err := step.Run(ctx, op, d, nil, func(context.Context, *step.Step) (int, error) { return 1, nil }); err != nil {
					return 0, err
				}
			}
			return step.Run(ctx, op, name, &step.Options{Unknown: step.HoldUnknown}, func(context.Context, *step.Step) (int, error) {
				panic("the process dies inside the step")
			})
		})
	}()
	rec, err := s.Get(context.Background(), key)
	if err != nil || rec.State != idem.StateHeld {
		t.Fatalf("holding %v in step %q: %v, %v", key, name, rec.State, err)
	}
	return rec
}

// 'idem keys list --state held', 'keys get' and 'keys resolve' on a key
// held in a step (issue 38): the STEP column (quoted, so that a hostile
// name cannot reach the terminal raw), "step" and "steps_finished" in
// JSON, and --step refuses a key held in another step or in none.
func TestKeysHeldStep(t *testing.T) {
	t.Parallel()
	dsn := sqliteDSN(t)
	if code, _, errs := runCLI(t, "migrate", "--store", dsn); code != 0 {
		t.Fatalf("migrate: %s", errs)
	}
	store := openDSN(t, dsn)
	ctx := context.Background()
	stepKey, plainKey := idem.MustKey("svc", "order-1"), idem.MustKey("svc", "pay-1")
	func() {
		defer func() { _ = recover() }()
		_, _ = idem.Do(ctx, store, plainKey, &idem.Options{AtMostOnce: true}, func(context.Context) (int, error) { panic("lost") })
	}()
	holdInStep(t, store, stepKey, hostileStep, "reserve")

	code, out, errs := runCLI(t, "keys", "list", "--store", dsn, "--state", "held")
	if code != 0 {
		t.Fatalf("keys list: %s", errs)
	}
	if strings.ContainsAny(out, "\x1b\x00") || !strings.Contains(out, "STEP") {
		t.Fatalf("keys list --state held shows the step name raw (or no STEP column):\n%q", out)
	}
	var stepLine, plainLine string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, stepKey.Digest().String()):
			stepLine = l
		case strings.HasPrefix(l, plainKey.Digest().String()):
			plainLine = l
		}
	}
	if !strings.Contains(stepLine, strconv.Quote(hostileStep)) || strings.Fields(plainLine)[4] != "-" {
		t.Fatalf("STEP column: step key %q, plain key %q", stepLine, plainLine)
	}
	var views []recordView
	code, out, errs = runCLI(t, "keys", "list", "--store", dsn, "--state", "held", "--json")
	if err := json.Unmarshal([]byte(out), &views); code != 0 || err != nil || len(views) != 2 {
		t.Fatalf("keys list --json: %d %v %s %s", code, err, errs, out)
	}
	if v := views[0]; v.Digest != stepKey.Digest().String() || v.Step != hostileStep || !slices.Equal(v.StepsFinished, []string{"reserve"}) || v.Kind != "do" {
		t.Fatalf("held step in JSON: %+v", v)
	}
	if v := views[1]; v.Step != "" || v.StepsFinished != nil {
		t.Fatalf("a key held in no step names one: %+v", v)
	}
	code, out, _ = runCLI(t, "keys", "get", "--store", dsn, "--digest", stepKey.Digest().String())
	if code != 0 || !strings.Contains(out, "held step:   "+strconv.Quote(hostileStep)) || !strings.Contains(out, "steps done:  reserve") || strings.ContainsAny(out, "\x1b\x00") {
		t.Fatalf("keys get:\n%q", out)
	}

	// --step: a forged name and a key held in no step are refused, and
	// nothing changes; the right one resolves.
	for _, c := range []struct {
		key        idem.Key
		step, want string
	}{
		{stepKey, "refund", `held in step "charge<b>x</b>`},
		{plainKey, "charge", "not held in a step"},
	} {
		code, _, errs := runCLI(t, "keys", "resolve", "--store", dsn, "--digest", c.key.Digest().String(), "--step", c.step, "--release")
		if code != 1 || !strings.Contains(errs, c.want) || strings.ContainsAny(errs, "\x1b\x00") {
			t.Fatalf("resolve %v --step %q: %d %q", c.key, c.step, code, errs)
		}
		if rec, _ := store.Get(ctx, c.key); rec.State != idem.StateHeld {
			t.Fatalf("a refused resolve changed the record: %v", rec.State)
		}
	}
	if code, _, errs := runCLI(t, "keys", "resolve", "--store", dsn, "--digest", stepKey.Digest().String(), "--step", hostileStep, "--body", `"paid"`); code != 0 {
		t.Fatalf("resolve --step: %d %s", code, errs)
	}
	v, err := step.Do(ctx, store.(step.Store), stepKey, nil, func(context.Context, *step.Op) (string, error) { t.Fatal("ran"); return "", nil })
	if err != nil || v != "paid" {
		t.Fatalf("step.Do after the resolution = %q, %v", v, err)
	}
}

// The operations API on keys held in a step (issue 38): the list names
// the step and filters by it, at no more store reads than a key held in
// no step costs; a resolution refuses another caller without the token, a
// cross-site page, a forged step, a key held in no step, and a stale
// session (a fence read before the key was resolved and held again); the
// operator's log line names the step.
func TestAdminOpsHeldStep(t *testing.T) {
	t.Parallel()
	s := &countingStore{Store: memstore.New(nil)}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	stepKey, plainKey := idem.MustKey("t", "order"), idem.MustKey("t", "pay")
	stale := holdInStep(t, s, stepKey, "charge", "reserve")
	// The key is released by an operator and held again in its next run:
	// a page opened before still shows the first fence.
	if err := idem.Resolve(ctx, s, idem.Resolution{Digest: stepKey.Digest(), Fence: stale.Fence, Release: true}); err != nil {
		t.Fatal(err)
	}
	held := holdInStep(t, s, stepKey, hostileStep, "reserve", "charge")
	func() {
		defer func() { _ = recover() }()
		_, _ = idem.Do(ctx, s, plainKey, &idem.Options{AtMostOnce: true}, func(context.Context) (int, error) { panic("lost") })
	}()
	var logs bytes.Buffer
	mux := http.NewServeMux()
	(&opsHandler{store: s, token: testAdminToken, log: slog.New(slog.NewTextHandler(&logs, nil))}).register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	list := func(query string) listAnswer {
		t.Helper()
		resp, err := oneShot.Get(srv.URL + "/ops/api/keys?" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var la listAnswer
		if err := json.NewDecoder(resp.Body).Decode(&la); err != nil || resp.StatusCode != 200 {
			t.Fatalf("list %s: %d %v", query, resp.StatusCode, err)
		}
		return la
	}
	s.rows.Store(0)
	la := list("state=held")
	if la.Count != 2 || la.Keys[0].Step != "" || la.Keys[1].Step != hostileStep || !slices.Equal(la.Keys[1].StepsFinished, []string{"reserve", "charge"}) {
		t.Fatalf("held keys: %+v", la)
	}
	if got := s.rows.Load(); got != 4 { // each key: its listed row, then its Lookup
		t.Fatalf("listing two held keys read %d records, want 4 (no read for the step)", got)
	}
	if la := list("state=held&step=" + url.QueryEscape(hostileStep)); la.Count != 1 || la.Keys[0].Digest != stepKey.Digest().String() {
		t.Fatalf("step filter: %+v", la)
	}
	if la := list("state=held&step=refund"); la.Count != 0 {
		t.Fatalf("step filter for a step no key is held in: %+v", la)
	}

	do := func(d idem.Digest, body string, hdr ...string) (int, string) {
		t.Helper()
		return postResolve(t, srv.URL, d, body, hdr...)
	}
	stepJSON, _ := json.Marshal(hostileStep)
	right := fmt.Sprintf(`{"fence":%d,"release":true,"step":%s}`, held.Fence, stepJSON)
	for _, c := range []struct {
		name string
		d    idem.Digest
		body string
		hdr  []string
		want int
	}{
		{"another caller, no token", stepKey.Digest(), right, []string{"Authorization", ""}, http.StatusUnauthorized},
		{"another caller, wrong token", stepKey.Digest(), right, []string{"Authorization", "Bearer not-the-admin-token"}, http.StatusUnauthorized},
		{"a page elsewhere", stepKey.Digest(), right, []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, http.StatusForbidden},
		{"forged step", stepKey.Digest(), fmt.Sprintf(`{"fence":%d,"release":true,"step":"refund"}`, held.Fence), nil, http.StatusConflict},
		{"step of the earlier hold", stepKey.Digest(), fmt.Sprintf(`{"fence":%d,"release":true,"step":"charge"}`, held.Fence), nil, http.StatusConflict},
		{"stale session", stepKey.Digest(), fmt.Sprintf(`{"fence":%d,"release":true,"step":"charge"}`, stale.Fence), nil, http.StatusConflict},
		{"a key held in no step", plainKey.Digest(), fmt.Sprintf(`{"fence":%d,"release":true,"step":"charge"}`, la.Keys[0].Fence), nil, http.StatusConflict},
	} {
		if code, body := do(c.d, c.body, c.hdr...); code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, code, body, c.want)
		}
	}
	if rec, _ := s.Get(ctx, stepKey); rec.State != idem.StateHeld || rec.Fence != held.Fence {
		t.Fatalf("refused resolutions changed the record: %v fence %d", rec.State, rec.Fence)
	}
	code, body := do(stepKey.Digest(), right, "Origin", srv.URL, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusOK {
		t.Fatalf("resolve: %d %s", code, body)
	}
	var out struct {
		Replaced recordView `json:"replaced"`
	}
	if err := json.Unmarshal([]byte(body), &out); err != nil || out.Replaced.Step != hostileStep {
		t.Fatalf("the answer does not name the replaced step: %s", body)
	}
	if !strings.Contains(logs.String(), `step="charge<b>x</b>\x1b[31m\x00\n"`) {
		t.Fatalf("the operator's log line does not name the step:\n%s", logs.String())
	}
	// Resolved meanwhile: the same session's second post is refused.
	if code, body := do(stepKey.Digest(), right); code != http.StatusConflict {
		t.Fatalf("a resolution of a key resolved meanwhile: %d %s", code, body)
	}
}
