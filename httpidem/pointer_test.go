package httpidem

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestFingerprintPointers: only the named values (and method, path,
// query) make a retry another request.
func TestFingerprintPointers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{FingerprintPointers: []string{"/amount", "/to"}}, nil)
	first := e.do("POST", "/transfers?x=1", "t1", `{"amount":100,"to":"acct_9","sent_at":"09:00:01"}`)
	if first.Code != 201 {
		t.Fatalf("first: %d", first.Code)
	}
	// Another timestamp, other key order and spacing: the same request.
	w := e.do("POST", "/transfers?x=1", "t1", ` {"sent_at":"09:00:07", "to":"acct_9","amount":100}`)
	if w.Header().Get(ReplayedHeader) != "true" || w.Body.String() != first.Body.String() {
		t.Fatalf("differs outside the pointers: %d %s, want the replay of %s", w.Code, w.Body, first.Body)
	}
	for _, other := range []struct{ method, target, body string }{
		{"POST", "/transfers?x=1", `{"amount":101,"to":"acct_9"}`},   // inside
		{"POST", "/transfers?x=1", `{"amount":100}`},                 // a pointer now names nothing
		{"POST", "/transfers?x=1", `{"amount":100.0,"to":"acct_9"}`}, // the literal counts
		{"POST", "/transfers/b?x=1", `{"amount":100,"to":"acct_9"}`}, // path
		{"POST", "/transfers?x=2", `{"amount":100,"to":"acct_9"}`},   // query
		{"PATCH", "/transfers?x=1", `{"amount":100,"to":"acct_9"}`},  // method
	} {
		problemOf(t, e.do(other.method, other.target, "t1", other.body), http.StatusUnprocessableEntity, ProblemMismatch)
	}
	// A body that is not JSON cannot be fingerprinted by its fields.
	for _, bad := range []string{`amount=100`, `{"amount":100`, `{"amount":1,"amount":2}`, `{} {}`} {
		problemOf(t, e.do("POST", "/transfers", "t-bad", bad), http.StatusBadRequest, ProblemBodyNotJSON)
	}
	if _, err := e.record("", "t-bad"); !errors.Is(err, idem.ErrNotFound) {
		t.Fatalf("a refused body left a record: %v", err)
	}
	// An empty body is no body, fingerprinted as today.
	if w := e.do("POST", "/transfers", "t-empty", ""); w.Code != 201 {
		t.Fatalf("empty body: %d %s", w.Code, w.Body)
	}
	e.wantCalls(2)
}

// TestKeyPointer: the key comes from the body when the header is absent,
// and names the same record as the header with that value; the header wins.
func TestKeyPointer(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	e := newEnv(t, &Config{KeyPointer: "/request_id", FingerprintPointers: []string{"/amount"}, RequireKey: true}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "charged")
	})
	body := `{"request_id":"rq-1","amount":5}`
	if w := e.do("POST", "/charges", "", body); w.Code != 201 || w.Header().Get(ReplayedHeader) != "" {
		t.Fatalf("first: %d %v", w.Code, w.Header())
	}
	if _, err := e.record("", "rq-1"); err != nil {
		t.Fatalf("no record under the body's key: %v", err)
	}
	if w := e.do("POST", "/charges", "", `{"amount":5,"request_id":"rq-1","trace":"2"}`); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("retry by body key: %d %v", w.Code, w.Header())
	}
	// The header with the same value names the same record.
	if w := e.do("POST", "/charges", `"rq-1"`, `{"amount":5}`); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("header with the body's key: %d %v", w.Code, w.Header())
	}
	// Both: the header wins.
	if w := e.do("POST", "/charges", "hdr-1", `{"request_id":"rq-1","amount":5}`); w.Code != 201 || w.Header().Get(ReplayedHeader) != "" {
		t.Fatalf("header and body key: %d %v, want a first execution under the header's key", w.Code, w.Header())
	}
	if _, err := e.record("", "hdr-1"); err != nil {
		t.Fatalf("no record under the header's key: %v", err)
	}
	// A number is its literal text.
	e.do("POST", "/charges", "", `{"request_id":12,"amount":5}`)
	if _, err := e.record("", "12"); err != nil {
		t.Fatalf("no record under the number key: %v", err)
	}
	// Inside the fingerprint: 422.
	problemOf(t, e.do("POST", "/charges", "", `{"request_id":"rq-1","amount":6}`), http.StatusUnprocessableEntity, ProblemMismatch)
	// A gzip body is read decoded.
	if w := e.do("POST", "/charges", "", string(gz(t, body)), "Content-Encoding", "gzip"); w.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("gzip body key: %d %v", w.Code, w.Header())
	}
	e.wantCalls(3)
	mu.Lock()
	if bodies[0] != body {
		t.Fatalf("the handler got %q", bodies[0])
	}
	mu.Unlock()

	for _, tc := range []struct{ body, typ string }{
		{`{"amount":5}`, ProblemMissingKey},
		{``, ProblemMissingKey},
		{`{"request_id":true}`, ProblemInvalidKey},
		{`{"request_id":null}`, ProblemInvalidKey},
		{`{"request_id":{"id":"x"}}`, ProblemInvalidKey},
		{`{"request_id":"has space"}`, ProblemInvalidKey},
		{`{"request_id":""}`, ProblemInvalidKey},
		{`{"request_id":"` + strings.Repeat("k", 256) + `"}`, ProblemInvalidKey},
		{`{"request_id":"rq-2"`, ProblemBodyNotJSON},
		{`request_id=rq-2`, ProblemBodyNotJSON},
	} {
		if tc.body == "" {
			tc.typ = ProblemBodyNotJSON // no body is not JSON either
		}
		p := problemOf(t, e.do("POST", "/charges", "", tc.body), http.StatusBadRequest, tc.typ)
		if !strings.Contains(p.Detail, "/request_id") && tc.typ != ProblemInvalidKey {
			t.Errorf("%.30s: detail %q does not name the pointer", tc.body, p.Detail)
		}
		if strings.Contains(p.Detail, "has space") {
			t.Errorf("the detail repeats the refused key: %q", p.Detail)
		}
	}
	e.wantCalls(3)
	// Anonymous callers are refused, as with a header key.
	problemOf(t, e.serve(anonReq("POST", "/charges", "", body)), http.StatusBadRequest, ProblemScopeRequired)
	e.wantCalls(3)
}

// TestKeyPointerKeyless: without RequireKey, a body that carries no key
// passes through unprotected, as a request without the header does, with
// its body intact; a bad value at the pointer is still refused.
func TestKeyPointerKeyless(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var bodies []string
	e := newEnv(t, &Config{KeyPointer: "/request_id"}, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, string(b))
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	noKey := []string{`{"amount":5}`, ``, `request_id=rq-2`, `{"request_id":`, `{"request_id":"rq-2`}
	for _, b := range noKey {
		for range 2 { // twice: nothing is stored, both run
			if w := e.do("POST", "/charges", "", b); w.Code != http.StatusCreated || w.Header().Get(ReplayedHeader) != "" {
				t.Fatalf("%q: %d %v, want a keyless pass-through", b, w.Code, w.Header())
			}
		}
	}
	e.wantCalls(int64(2 * len(noKey)))
	mu.Lock()
	for i, b := range noKey {
		if bodies[2*i] != b {
			t.Errorf("the handler got %q, want %q", bodies[2*i], b)
		}
	}
	mu.Unlock()
	problemOf(t, e.do("POST", "/charges", "", `{"request_id":true}`), http.StatusBadRequest, ProblemInvalidKey)
	// An anonymous request without a key passes too; one with a key is
	// refused.
	if w := e.serve(anonReq("POST", "/charges", "", `{"amount":5}`)); w.Code != http.StatusCreated {
		t.Fatalf("anonymous keyless: %d", w.Code)
	}
	problemOf(t, e.serve(anonReq("POST", "/charges", "", `{"request_id":"rq-3"}`)), http.StatusBadRequest, ProblemScopeRequired)
	e.wantCalls(int64(2*len(noKey) + 1))
}

// TestKeyPointerConcurrentDuplicates: duplicates keyed only in the body
// run once.
func TestKeyPointerConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{KeyPointer: "/request_id", WaitTimeout: 10 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "once")
	})
	const n = 24
	ws := make([]*httptest.ResponseRecorder, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { ws[i] = e.do("POST", "/charges", "", `{"request_id":"dup-1","amount":5}`) })
	}
	wg.Wait()
	e.wantCalls(1)
	replays := 0
	for _, w := range ws {
		if w.Code != 201 || w.Body.String() != "once" {
			t.Fatalf("%d %s", w.Code, w.Body)
		}
		if w.Header().Get(ReplayedHeader) == "true" {
			replays++
		}
	}
	if replays != n-1 {
		t.Fatalf("%d replays of %d", replays, n)
	}
}

func TestPointerConfigValidate(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]*Config{
		"FingerprintPointers": {FingerprintPointers: []string{"/a", "b"}},
		"KeyPointer":          {KeyPointer: "request_id"},
	} {
		_, err := New(newEnv(t, nil, nil).store, cfg)
		var ce *idem.ConfigError
		if !errors.As(err, &ce) || !strings.Contains(ce.Field, name) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// FuzzKeyPointer: the middleware reads the body's key as idem.KeyFromJSON
// does, and refuses everything else with a 400 of the right type.
func FuzzKeyPointer(f *testing.F) {
	for _, s := range []string{`{"request_id":"r-1"}`, `{"request_id":7}`, `{"request_id":[1]}`, `{"request_id":"a b"}`, `{"x":1}`, `{`, `[]`, `{"request_id":"\u00e9"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if len(body) > 1<<16 {
			return // 413, tested elsewhere
		}
		e := newEnv(t, &Config{KeyPointer: "/request_id", MaxBody: 1 << 16, RequireKey: true}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
		w := e.do("POST", "/x", "", string(body))
		want, err := idem.KeyFromJSON(testScope, body, "/request_id")
		switch {
		case err == nil:
			if w.Code != http.StatusCreated {
				t.Fatalf("key %q: %d %s", want.ID(), w.Code, w.Body)
			}
			if _, err := e.store.Get(t.Context(), want); err != nil {
				t.Fatalf("no record under %q: %v", want.ID(), err)
			}
			if w := e.do("POST", "/x", FormatKey(want.ID()), string(body)); w.Header().Get(ReplayedHeader) != "true" {
				t.Fatalf("the header spelling of %q does not name the same record", want.ID())
			}
		case errors.Is(err, idem.ErrInvalidJSON):
			problemOf(t, w, http.StatusBadRequest, ProblemBodyNotJSON)
		case errors.Is(err, idem.ErrKeyNotFound):
			problemOf(t, w, http.StatusBadRequest, ProblemMissingKey)
		case errors.Is(err, idem.ErrInvalidKey):
			problemOf(t, w, http.StatusBadRequest, ProblemInvalidKey)
		default:
			t.Fatalf("unexpected error %v", err)
		}
	})
}

// TestDeepJSONBody: a body nested deeper than the JSON decoder takes is
// not JSON to the middleware: fingerprinted as sent with JSONFingerprint,
// refused with FingerprintPointers or KeyPointer; the process lives.
func TestDeepJSONBody(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 4<<20) + strings.Repeat("]", 4<<20)
	if w := newEnv(t, &Config{JSONFingerprint: true}, nil).do("POST", "/x", "k", deep); w.Code != http.StatusCreated {
		t.Fatalf("JSONFingerprint: %d", w.Code)
	}
	problemOf(t, newEnv(t, &Config{FingerprintPointers: []string{"/0"}}, nil).do("POST", "/x", "k", deep), http.StatusBadRequest, ProblemBodyNotJSON)
	problemOf(t, newEnv(t, &Config{KeyPointer: "/0", RequireKey: true}, nil).do("POST", "/x", "", deep), http.StatusBadRequest, ProblemBodyNotJSON)
}

// TestKeyPointerMalformedBodyBinds: a body that carries a key at the
// pointer but cannot be fingerprinted (not exactly one valid JSON value in
// UTF-8) is refused with 400 body-not-json whatever RequireKey says: sent
// twice over a real connection, it never reaches the handler, so it never
// runs unprotected.
func TestKeyPointerMalformedBodyBinds(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", 10001) + strings.Repeat("]", 10001)
	bodies := []string{
		`{"request_id":"order-1","amount":100,"meta":{"src":"web","src":"web"}}`,
		`{"request_id":"order-1","amount":100,"amount":100}`,
		`{"meta":[{"a":{"b":1,"b":1}}],"request_id":"order-1"}`,
		`{"request_id":"order-1","request_id":"order-1"}`,
		`{"request_id":"order-1","amount":1},{"amount":5000}`,
		`{"request_id":"order-1","amount":1}}`,
		`{"request_id":"order-1","amount":1} trailing`,
		"{\"request_id\":\"order-1\",\"to\":\"Ren\xe9\"}",
		"{\"to\":\"Ren\xe8\",\"request_id\":\"order-1\"}",
		`{"request_id":"order-1","to":"\ud800"}`,
		`{"to":"\udc00","request_id":"order-1"}`,
		`{"request_id":"order-1","deep":` + deep + `}`,
		`{"deep":` + deep + `,"request_id":"order-1"}`,
		`{"request_\u0069d":"order-1","x":1,"x":2}`,
		`{"request_id":"order-1"`,
	}
	for _, requireKey := range []bool{false, true} {
		var calls atomic.Int64
		e := newEnv(t, &Config{KeyPointer: "/request_id", RequireKey: requireKey}, func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			w.WriteHeader(http.StatusCreated)
		})
		srv := httptest.NewServer(e.h)
		for _, body := range bodies {
			for range 2 {
				r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader(body))
				r.Header.Set("Authorization", "Bearer test-caller")
				r.Header.Set("Content-Type", "application/json")
				resp, err := srv.Client().Do(r)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), ProblemBodyNotJSON) {
					t.Errorf("RequireKey %v, %.60q: %d %s, want 400 body-not-json", requireKey, body, resp.StatusCode, b)
				}
			}
		}
		srv.Close()
		if n := calls.Load(); n != 0 {
			t.Errorf("RequireKey %v: the handler ran %d times for bodies with a key it could not protect", requireKey, n)
		}
	}
}

// FuzzBodyNamesKey: the lenient reading agrees with the strict one on
// every body the strict one accepts, and never loops or panics on the
// rest.
func FuzzBodyNamesKey(f *testing.F) {
	for _, s := range []string{`{"request_id":"r-1"}`, `{"a":[1,{"b":"x"}]}`, `{"request_id":"r","x":1,"x":1}`, `[{"request_id":1}]`, `{"request_id":`, `{:[,]}`, `[:]`} {
		f.Add([]byte(s), "/request_id")
	}
	f.Add([]byte(`[1,[2,{"k":3}]]`), "/1/1/k")
	f.Fuzz(func(t *testing.T, body []byte, ptr string) {
		got := bodyNamesKey(body, ptr)
		canon, err := idem.CanonicalJSON(body)
		if err != nil || ptr == "" || ptr[0] != '/' {
			return
		}
		if _, err := idem.FingerprintJSONPointers(canon, "", ptr); err != nil {
			t.Fatalf("pointer %q: %v", ptr, err)
		}
		_, kerr := idem.KeyFromJSON("s", body, ptr)
		strict := !errors.Is(kerr, idem.ErrKeyNotFound)
		if got != strict {
			t.Fatalf("%q at %q: lenient %v, strict %v (%v)", body, ptr, got, strict, kerr)
		}
	})
}
