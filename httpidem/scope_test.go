package httpidem

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

func TestHeaderScopeNormalisesAuthorization(t *testing.T) {
	t.Parallel()
	f := HeaderScope("Authorization")
	scope := func(v string) string {
		s, err := f(anonReq("POST", "/", "", "", "Authorization", v))
		if err != nil || s == "" {
			t.Fatalf("scope(%q) = %q, %v", v, s, err)
		}
		return s
	}
	same := [][]string{
		{"Bearer t", "bearer  t", "BEARER\tt", "  Bearer t  ", "bEaReR \t t"},
		{"Basic dXNlcjpwdw==", "basic dXNlcjpwdw=="},
		{`Digest a=1,  b="x"`, `digest a=1, b="x"`},
	}
	for _, group := range same {
		for _, v := range group[1:] {
			if scope(v) != scope(group[0]) {
				t.Errorf("%q and %q are different callers", group[0], v)
			}
		}
	}
	differ := []string{"Bearer t", "Bearer T", "Bearer tt", "Basic t", "Bearert", "Bearer t x"}
	seen := map[string]string{}
	for _, v := range differ {
		s := scope(v)
		if prev, ok := seen[s]; ok {
			t.Errorf("%q and %q are one caller: the credentials are case-sensitive", prev, v)
		}
		seen[s] = v
	}
	// Long values (past the stack buffer) normalise the same way.
	long := "x"
	for len(long) < 600 {
		long += long
	}
	if scope("Bearer "+long) != scope("bearer   "+long) {
		t.Error("long credentials: not normalised")
	}
	// Other headers: only surrounding white space is ignored.
	g := HeaderScope("X-Tenant", "X-User")
	s1, _ := g(anonReq("POST", "/", "", "", "X-Tenant", " acme ", "X-User", "7"))
	s2, _ := g(anonReq("POST", "/", "", "", "X-Tenant", "acme", "X-User", "7"))
	s3, _ := g(anonReq("POST", "/", "", "", "X-Tenant", "Acme", "X-User", "7"))
	s4, _ := g(anonReq("POST", "/", "", "", "X-Tenant", "acme"))
	if s1 != s2 || s2 == s3 || s2 == s4 || s4 == "" {
		t.Errorf("gateway headers: %q %q %q %q", s1, s2, s3, s4)
	}
}

func FuzzHeaderScopeAuthorization(f *testing.F) {
	for _, s := range []string{"Bearer t", "  basic \t x  y ", "", "\t", "a"} {
		f.Add(s)
	}
	hs := HeaderScope("Authorization")
	f.Fuzz(func(t *testing.T, v string) {
		r, _ := http.NewRequest("POST", "/", nil)
		r.Header["Authorization"] = []string{v}
		a, err := hs(r)
		if err != nil || (a == "") != (strings.Trim(v, " \t") == "") {
			t.Fatalf("%q: %q %v (anonymous exactly when the value is empty or white space)", v, a, err)
		}
		// Adding white space around or inside white-space runs, or
		// changing the scheme's case, never changes the scope.
		r.Header["Authorization"] = []string{" \t" + spaceRuns(v) + " "}
		if b, _ := hs(r); b != a {
			t.Fatalf("%q: white space changed the scope", v)
		}
	})
}

// spaceRuns doubles every space and tab.
func spaceRuns(s string) string {
	out := make([]byte, 0, 2*len(s))
	for i := 0; i < len(s); i++ {
		out = append(out, s[i])
		if s[i] == ' ' || s[i] == '\t' {
			out = append(out, '\t')
		}
	}
	return string(out)
}

func TestAnonymousKeyedRequestRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	w := e.serve(anonReq("POST", "/charges", "anon-1", "x"))
	problemOf(t, w, http.StatusBadRequest, ProblemScopeRequired)
	e.wantCalls(0)
	// No record was made: an identified caller with the same key runs.
	if _, err := e.record("", "anon-1"); err == nil {
		t.Fatal("a refused anonymous request left a record")
	}
	// Keyless anonymous requests still pass through, unprotected.
	if w := e.serve(anonReq("POST", "/charges", "", "x")); w.Code != http.StatusCreated {
		t.Fatalf("keyless anonymous: %d", w.Code)
	}
	// A ScopeFunc that reports ErrScopeRequired gets the same answer.
	e2 := newEnv(t, &Config{ScopeFunc: func(r *http.Request) (string, error) {
		return "", fmt.Errorf("no tenant: %w", ErrScopeRequired)
	}}, nil)
	problemOf(t, e2.do("POST", "/charges", "k", "x"), http.StatusBadRequest, ProblemScopeRequired)
	e2.wantCalls(0)
}

func TestSharedAnonymousScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, &Config{SharedAnonymousScope: true}, nil)
	first := e.serve(anonReq("POST", "/charges", "anon-1", "x"))
	again := e.serve(anonReq("POST", "/charges", "anon-1", "x"))
	if first.Code != http.StatusCreated || again.Header().Get(ReplayedHeader) != "true" {
		t.Fatalf("shared anonymous: %d, replay %v", first.Code, again.Header())
	}
	// An identified caller's same key is another record.
	if w := e.do("POST", "/charges", "anon-1", "x"); w.Header().Get(ReplayedHeader) != "" {
		t.Fatal("an identified caller got the anonymous keyspace's response")
	}
	e.wantCalls(2)
}

// TestEmptyCredentialIsAnonymous: over a real connection, an
// Authorization header that is empty or only white space is no caller
// identity: a keyed request is refused with 400 scope-required (nothing
// runs, nothing is stored), unless SharedAnonymousScope is set, where it
// joins the one anonymous keyspace and never another caller's.
func TestEmptyCredentialIsAnonymous(t *testing.T) {
	t.Parallel()
	send := func(srv *httptest.Server, auth []string, key string) (*http.Response, string) {
		r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("x"))
		r.Header["Authorization"] = auth
		r.Header.Set("Idempotency-Key", key)
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	empties := [][]string{{""}, {" "}, {"\t"}, {" \t  "}, {"", " "}}
	e := newEnv(t, nil, nil)
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	var wg sync.WaitGroup
	for _, auth := range empties {
		wg.Go(func() {
			resp, body := send(srv, auth, "anon-empty")
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, ProblemScopeRequired) {
				t.Errorf("Authorization %q: %d %s, want 400 scope-required", auth, resp.StatusCode, body)
			}
		})
	}
	wg.Wait()
	e.wantCalls(0)

	shared := newEnv(t, &Config{SharedAnonymousScope: true}, nil)
	ssrv := httptest.NewServer(shared.h)
	defer ssrv.Close()
	for i, auth := range append(empties, nil) { // nil: no header at all
		resp, _ := send(ssrv, auth, "anon-shared")
		if replayed := resp.Header.Get(ReplayedHeader) == "true"; replayed != (i > 0) {
			t.Errorf("Authorization %q: replayed %v; every empty value is the one anonymous keyspace", auth, replayed)
		}
	}
	if resp, _ := send(ssrv, []string{"Bearer someone"}, "anon-shared"); resp.Header.Get(ReplayedHeader) != "" {
		t.Error("an identified caller got the anonymous keyspace's response")
	}
	shared.wantCalls(2)
}

// TestBareCredentialKeepsCase: over a real connection, an Authorization
// value with no space (no scheme) is a credential compared byte for
// byte: two that differ only in case are two callers, each running once.
func TestBareCredentialKeepsCase(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil, nil)
	srv := httptest.NewServer(e.h)
	defer srv.Close()
	for _, auth := range []string{"SK_live_AbCdEf", "sk_LIVE_aBcDeF", " SK_live_AbCdEf "} {
		r, _ := http.NewRequest("POST", srv.URL+"/charges", strings.NewReader("x"))
		r.Header.Set("Authorization", auth)
		r.Header.Set("Idempotency-Key", "bare-1")
		resp, err := srv.Client().Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if got, want := resp.Header.Get(ReplayedHeader) == "true", auth[0] == ' '; got != want {
			t.Errorf("%q: replayed %v, want %v", auth, got, want)
		}
	}
	e.wantCalls(2)
}
