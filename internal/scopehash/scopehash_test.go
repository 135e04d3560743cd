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
		for _, v := range []string{"", " ", "\t", " \t "} {
			if s := scope(v); s != "" {
				t.Errorf("%s: the empty credential %q is a caller", name, v)
			}
		}
		seen := map[string]string{}
		for _, v := range []string{"Bearer x", "Bearer X", "Bearer xx", "Basic x", "Bearerx", "Bearer x y", "SK_live_AbCdEf", "sk_LIVE_aBcDeF"} {
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
	sum := func(vs []string, cred bool) string {
		b, _ := scopehash.AppendValues(nil, vs, cred)
		return scopehash.Sum("t:", b)
	}
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
	if sum([]string{"ab", "c"}, false) == sum([]string{"a", "bc"}, false) || sum([]string{"a", "a"}, false) == sum([]string{"a"}, false) {
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
		a, _ := scopehash.AppendValues(nil, []string{v}, true)
		spaced := strings.ContainsAny(strings.Trim(v, " \t"), " \t")
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
			if spaced && scheme && 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			b.WriteByte(c)
		}
		b.WriteString("\t ")
		if got, _ := scopehash.AppendValues(nil, []string{b.String()}, true); string(got) != string(a) {
			t.Fatalf("%q and %q normalise differently", v, b.String())
		}
	})
}

// TestEmptyIsAbsent: an empty or white-space-only value is no identity.
// Alone it is anonymous; beside others it counts as absent.
func TestEmptyIsAbsent(t *testing.T) {
	t.Parallel()
	for _, cred := range []bool{true, false} {
		for _, vs := range [][]string{{""}, {" "}, {"\t \t"}, {"", " "}} {
			if _, ok := scopehash.AppendValues(nil, vs, cred); ok {
				t.Errorf("%q (credentials %v): an identity", vs, cred)
			}
		}
		a, _ := scopehash.AppendValues(nil, []string{"Bearer x", " "}, cred)
		b, _ := scopehash.AppendValues(nil, []string{"Bearer x"}, cred)
		if string(a) != string(b) {
			t.Errorf("credentials %v: an empty line beside a value counts", cred)
		}
	}
}

// TestBareCredentialKeepsCase: only the scheme before the first space is
// case-folded; a value with no space is a credential, byte for byte.
func TestBareCredentialKeepsCase(t *testing.T) {
	t.Parallel()
	sum := func(v string) string {
		b, _ := scopehash.AppendValues(nil, []string{v}, true)
		return scopehash.Sum("t:", b)
	}
	if sum("SK_live_AbCdEf") == sum("sk_LIVE_aBcDeF") {
		t.Error("two bare credentials that differ in case are one caller")
	}
	if sum(" SK_live_AbCdEf\t") != sum("SK_live_AbCdEf") {
		t.Error("surrounding white space counts")
	}
	if sum("Bearer x") != sum("BEARER x") || sum("Bearer x") == sum("Bearer X") {
		t.Error("the scheme is not folded, or the credential is")
	}
}

// TestDigestsPinned: the digest of every value whose meaning did not
// change is what earlier releases stored.
func TestDigestsPinned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		vs   []string
		cred bool
		want string
	}{
		{[]string{"Bearer x"}, true, "h1:6353083ccbdd869e1ec152a0729748642bec8a03ae74889126f6a055a96e7ac4"},
		{[]string{" bearer \t x "}, true, "h1:6353083ccbdd869e1ec152a0729748642bec8a03ae74889126f6a055a96e7ac4"},
		{[]string{"t-1"}, false, "h1:dc07162f390783819e83e9dfa0a1a40619baa22203c8ac9d77f40cad838b9c26"},
		{[]string{"Basic a b", "Bearer y"}, true, "h1:0571c7e61e8cb56dd9a3c7c8d7ebcb40a7bfb24039976a67243f08450c29704b"},
	} {
		b, _ := scopehash.AppendValues(nil, c.vs, c.cred)
		if got := scopehash.Sum("h1:", b); got != c.want {
			t.Errorf("%q: %s, pinned %s", c.vs, got, c.want)
		}
	}
}
