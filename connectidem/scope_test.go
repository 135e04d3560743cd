package connectidem_test

import (
	"context"
	"sync"
	"testing"

	"connectrpc.com/connect"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/internal/configtest"
)

// TestSchemeCaseAndSpaceOneCaller: over a real connection, concurrent calls
// whose Authorization differs only in the scheme's case and the white
// space run once; other credentials are another caller.
func TestSchemeCaseAndSpaceOneCaller(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	call := func(auth string) string {
		req := connect.NewRequest(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte("charge")}})
		req.Header().Set("Authorization", auth)
		req.Header().Set("Idempotency-Key", "k-scope")
		resp, err := e.client.CallUnary(context.Background(), req)
		if err != nil {
			t.Errorf("%q: %v", auth, err)
			return ""
		}
		return resp.Msg.GetUsername()
	}
	first := call("Bearer x")
	var wg sync.WaitGroup
	for _, auth := range []string{"bearer  x", "BEARER\tx", " Bearer \t x"} {
		wg.Go(func() {
			if got := call(auth); got != first {
				t.Errorf("%q: %q, want the replay %q", auth, got, first)
			}
		})
	}
	wg.Wait()
	if n := e.count("charge"); n != 1 {
		t.Fatalf("ran %d times for one caller", n)
	}
	if got := call("Bearer X"); got == first {
		t.Fatal("credentials are case-sensitive: Bearer X is another caller")
	}
}

func TestHeaderScope(t *testing.T) {
	t.Parallel()
	f := connectidem.HeaderScope("Authorization", "X-Tenant")
	scope := func(h ...string) string {
		req := connect.NewRequest(&testpb.SimpleRequest{})
		for i := 0; i+1 < len(h); i += 2 {
			req.Header().Add(h[i], h[i+1])
		}
		s, err := f(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := scope("Authorization", "Bearer x", "X-Tenant", "acme")
	if s := scope("authorization", "bearer\t x", "x-tenant", " acme"); s != a {
		t.Error("normalised values: another scope")
	}
	if s := scope("Authorization", "Bearer x"); s == a || s == "" {
		t.Errorf("without the tenant: %q", s)
	}
	if s := scope("Cookie", "c"); s != "" {
		t.Errorf("none of the headers: %q, want anonymous", s)
	}
}

func TestNewNilStore(t *testing.T) {
	t.Parallel()
	_, err := connectidem.New(nil, nil)
	configtest.Want(t, err, "connectidem", "store")
}

// TestEmptyCredentialIsAnonymous: over a real connection, an
// Authorization header that is empty or only white space is no caller
// identity: a keyed call is refused with InvalidArgument and never runs;
// a credential with no space (no scheme) keeps its case.
func TestEmptyCredentialIsAnonymous(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	send := func(auth []string, key, body string) (*connect.Response[testpb.SimpleResponse], error) {
		req := connect.NewRequest(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}})
		req.Header()["Authorization"] = auth
		req.Header().Set("Idempotency-Key", key)
		return e.client.CallUnary(context.Background(), req)
	}
	for _, auth := range [][]string{{""}, {" "}, {"\t"}, {"", " \t "}} {
		if _, err := send(auth, "k-empty", "empty"); connect.CodeOf(err) != connect.CodeInvalidArgument {
			t.Errorf("Authorization %q: %v, want InvalidArgument", auth, err)
		}
	}
	if n := e.count("empty"); n != 0 {
		t.Fatalf("ran %d times without a caller identity", n)
	}
	a, errA := send([]string{"SK_live_AbCdEf"}, "k-bare", "bare")
	b, errB := send([]string{"sk_LIVE_aBcDeF"}, "k-bare", "bare")
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if a.Msg.GetUsername() == b.Msg.GetUsername() {
		t.Fatal("two bare credentials that differ in case are one caller")
	}
}
