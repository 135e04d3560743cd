package httpidem

import (
	"fmt"
	"net/http"
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
		if err != nil || a == "" {
			t.Fatalf("%q: %q %v", v, a, err)
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
