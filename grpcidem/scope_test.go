package grpcidem_test

import (
	"context"
	"sync"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/rpcidem/grpctest"
)

// TestSchemeCaseAndSpaceOneCaller: the default scope compares the auth
// scheme case-insensitively and white space normalised, over a real
// connection: concurrent calls spelled three ways run once; other
// credentials are another caller.
func TestSchemeCaseAndSpaceOneCaller(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), nil)
	call := func(auth string) string {
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", auth, "idempotency-key", "k-scope"))
		resp, err := e.Client.UnaryCall(ctx, grpctest.Req("charge"))
		if err != nil {
			t.Errorf("%q: %v", auth, err)
			return ""
		}
		return resp.GetUsername()
	}
	first := call("Bearer x")
	var wg sync.WaitGroup
	for _, auth := range []string{"bearer  x", "BEARER x", "  Bearer   x "} { // gRPC metadata carries no tabs
		wg.Go(func() {
			if got := call(auth); got != first {
				t.Errorf("%q: %q, want the replay %q", auth, got, first)
			}
		})
	}
	wg.Wait()
	if n := e.Svc.Count("charge"); n != 1 {
		t.Fatalf("ran %d times for one caller", n)
	}
	if got := call("Bearer X"); got == first {
		t.Fatal("credentials are case-sensitive: Bearer X is another caller")
	}
}

func TestMetadataScope(t *testing.T) {
	t.Parallel()
	scope := func(kv ...string) string {
		s, err := grpcidem.MetadataScope("authorization", "x-tenant")(metadata.NewIncomingContext(context.Background(), metadata.Pairs(kv...)))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := scope("authorization", "Bearer x", "x-tenant", "acme")
	for _, v := range []string{"bearer  x", "BEARER\tx", " Bearer x\t"} {
		if s := scope("authorization", v, "x-tenant", " acme "); s != a {
			t.Errorf("%q: another scope", v)
		}
	}
	for _, kv := range [][]string{
		{"authorization", "Bearer X", "x-tenant", "acme"},
		{"authorization", "Bearer x", "x-tenant", "Acme"},
		{"authorization", "Bearer x"},
		{"x-tenant", "acme"},
	} {
		if s := scope(kv...); s == a || s == "" {
			t.Errorf("%q: scope %q", kv, s)
		}
	}
	if s := scope("other", "v"); s != "" {
		t.Errorf("no scope entries: %q, want anonymous", s)
	}
}

func TestNewNilStore(t *testing.T) {
	t.Parallel()
	_, err := grpcidem.New(nil, nil)
	configtest.Want(t, err, "grpcidem", "store")
}

// TestEmptyCredentialIsAnonymous: over a real connection, authorization
// metadata that is empty or only spaces is no caller identity: a keyed
// call is refused with InvalidArgument and never runs; a credential with
// no space (no scheme) keeps its case.
func TestEmptyCredentialIsAnonymous(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), nil)
	for _, auth := range [][]string{{""}, {" "}, {"   "}, {"", " "}} {
		kv := []string{"idempotency-key", "k-empty"}
		for _, a := range auth {
			kv = append(kv, "authorization", a)
		}
		_, err := e.Client.UnaryCall(metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...)), grpctest.Req("empty"))
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("authorization %q: %v, want InvalidArgument", auth, err)
		}
	}
	if n := e.Svc.Count("empty"); n != 0 {
		t.Fatalf("ran %d times without a caller identity", n)
	}
	call := func(auth string) string {
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", auth, "idempotency-key", "k-bare"))
		resp, err := e.Client.UnaryCall(ctx, grpctest.Req("bare"))
		if err != nil {
			t.Fatalf("%q: %v", auth, err)
		}
		return resp.GetUsername()
	}
	if a, b := call("SK_live_AbCdEf"), call("sk_LIVE_aBcDeF"); a == b {
		t.Fatal("two bare credentials that differ in case are one caller")
	}
}
