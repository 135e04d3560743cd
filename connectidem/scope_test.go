package connectidem_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"connectrpc.com/connect"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/connectidem"
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
	var ce *idem.ConfigError
	if _, err := connectidem.New(nil, nil); !errors.As(err, &ce) {
		t.Fatalf("nil store: %v", err)
	}
}
