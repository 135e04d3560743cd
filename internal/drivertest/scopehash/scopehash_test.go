package scopehash_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/scopehash"
)

// TestAdaptersAgree: httpidem, grpcidem and connectidem give one caller
// one scope for the spellings RFC 9110 makes equal, and tell apart the
// credentials that differ.
func TestAdaptersAgree(t *testing.T) {
	t.Parallel()
	adapters := map[string]func(auth string) string{
		"httpidem": func(auth string) string {
			r, _ := http.NewRequest("POST", "/", nil)
			r.Header.Set("Authorization", auth)
			s, _ := httpidem.HeaderScope("Authorization")(r)
			return s
		},
		"grpcidem": func(auth string) string {
			s, _ := grpcidem.MetadataScope("authorization")(metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", auth)))
			return s
		},
		"connectidem": func(auth string) string {
			req := connect.NewRequest(&testpb.SimpleRequest{})
			req.Header().Set("Authorization", auth)
			s, _ := connectidem.HeaderScope("Authorization")(context.Background(), req)
			return s
		},
	}
	for name, scope := range adapters {
		one := scope("Bearer x")
		if one == "" {
			t.Fatalf("%s: anonymous", name)
		}
		for _, v := range []string{"bearer  x", "BEARER\tx", " Bearer x ", "bEaReR \t x"} {
			if s := scope(v); s != one {
				t.Errorf("%s: %q and \"Bearer x\" are two callers", name, v)
			}
		}
		seen := map[string]string{}
		for _, v := range []string{"Bearer x", "Bearer X", "Bearer xx", "Basic x", "Bearerx", "Bearer x y"} {
			s := scope(v)
			if prev, ok := seen[s]; ok {
				t.Errorf("%s: %q and %q are one caller", name, prev, v)
			}
			seen[s] = v
		}
	}
}

func TestAppendValues(t *testing.T) {
	t.Parallel()
	sum := func(vs []string, cred bool) string { return scopehash.Sum("t:", scopehash.AppendValues(nil, vs, cred)) }
	if sum([]string{"Bearer  x"}, true) != sum([]string{"bearer x"}, true) {
		t.Error("credentials not normalised")
	}
	if sum([]string{"Bearer  x"}, false) == sum([]string{"bearer x"}, false) {
		t.Error("other values: only surrounding white space may be ignored")
	}
	if sum([]string{" v\t"}, false) != sum([]string{"v"}, false) {
		t.Error("surrounding white space counts")
	}
	// Framing: the split between values counts.
	if sum([]string{"ab", "c"}, false) == sum([]string{"a", "bc"}, false) || sum([]string{"a"}, false) == sum([]string{"a", ""}, false) {
		t.Error("values are not length-prefixed")
	}
	long := strings.Repeat("z", 300) // a length prefix of two bytes that shrinks to one
	if sum([]string{"Bearer  " + long[:126]}, true) != sum([]string{"bearer " + long[:126]}, true) {
		t.Error("a prefix that shrinks when normalised")
	}
	if s := scopehash.Sum("h1:", nil); !strings.HasPrefix(s, "h1:") || len(s) != 3+64 {
		t.Errorf("Sum: %q", s)
	}
	for _, n := range []string{"Authorization", "authorization", "PROXY-AUTHORIZATION"} {
		if !scopehash.IsCredentials(n) {
			t.Errorf("%s: not credentials", n)
		}
	}
	if scopehash.IsCredentials("X-Tenant") {
		t.Error("X-Tenant: credentials")
	}
}

func FuzzAppendCredentials(f *testing.F) {
	for _, s := range []string{"Bearer t", "  basic \t x  y ", "", "\t", strings.Repeat("a ", 80)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a := scopehash.AppendValues(nil, []string{v}, true)
		// More white space in every run, around, and the scheme's case
		// changed: the same bytes.
		var b strings.Builder
		b.WriteString(" \t")
		scheme := true
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c == ' ' || c == '\t' {
				scheme = false
				b.WriteString(" \t")
				continue
			}
			if scheme && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
		}
		b.WriteString("\t ")
		if got := scopehash.AppendValues(nil, []string{b.String()}, true); string(got) != string(a) {
			t.Fatalf("%q and %q normalise differently", v, b.String())
		}
	})
}
