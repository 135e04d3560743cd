package grpcidem_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/rpcidem/grpctest"
	"github.com/idemkit/idem/memstore"
)

func newMem(t *testing.T) idem.Store {
	s := memstore.New(nil)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestReplay(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), nil)
	var first *testpb.SimpleResponse
	for i := range 5 {
		var hdr metadata.MD
		resp, err := e.Client.UnaryCall(grpctest.CallCtx("k1", "alice"), grpctest.Req("charge"), grpc.Header(&hdr))
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = resp
			if len(hdr.Get(grpcidem.ReplayedMetadataKey)) != 0 {
				t.Fatal("first answer marked as replayed")
			}
		} else {
			if resp.GetUsername() != first.GetUsername() {
				t.Fatalf("replay %d: %q, first %q", i, resp.GetUsername(), first.GetUsername())
			}
			if got := hdr.Get(grpcidem.ReplayedMetadataKey); len(got) != 1 || got[0] != "true" {
				t.Fatalf("replay %d not marked: %v", i, hdr)
			}
			if got := hdr.Get("x-execution"); len(got) != 1 || got[0] != "1" {
				t.Fatalf("replay %d lost the handler's header metadata: %v", i, hdr)
			}
		}
	}
	if n := e.Svc.Count("charge"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), nil)
	var wg sync.WaitGroup
	var ok, aborted atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.Client.UnaryCall(grpctest.CallCtx("k-conc", "alice"), grpctest.Req("slow-charge"))
			switch status.Code(err) {
			case codes.OK:
				ok.Add(1)
			case codes.Aborted:
				aborted.Add(1)
				st := status.Convert(err)
				found := false
				for _, d := range st.Details() {
					if ri, isRI := d.(*errdetails.RetryInfo); isRI && ri.GetRetryDelay().AsDuration() > 0 {
						found = true
					}
				}
				if !found {
					t.Errorf("Aborted without RetryInfo: %v", st.Details())
				}
			default:
				t.Errorf("unexpected %v", err)
			}
		}()
	}
	wg.Wait()
	if n := e.Svc.Count("slow-charge"); n != 1 {
		t.Fatalf("%d executions of one key", n)
	}
	if ok.Load() == 0 || ok.Load()+aborted.Load() != 50 {
		t.Fatalf("ok %d aborted %d", ok.Load(), aborted.Load())
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), &grpcidem.Config{RequireKey: true})
	if _, err := e.Client.UnaryCall(grpctest.CallCtx("k-m", "alice"), grpctest.Req("a")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		ctx  context.Context
		body string
		want codes.Code
	}{
		{"mismatch", grpctest.CallCtx("k-m", "alice"), "b", codes.FailedPrecondition},
		{"no key", grpctest.CallCtx("", "alice"), "a", codes.InvalidArgument},
		{"long key", grpctest.CallCtx(strings.Repeat("k", 300), "alice"), "a", codes.InvalidArgument},
		{"two keys", metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "x", "idempotency-key", "a", "idempotency-key", "b")), "a", codes.InvalidArgument},
		{"no caller", metadata.NewOutgoingContext(context.Background(), metadata.Pairs("idempotency-key", "k-anon")), "a", codes.InvalidArgument},
	}
	for _, c := range cases {
		_, err := e.Client.UnaryCall(c.ctx, grpctest.Req(c.body))
		if got := status.Code(err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := e.Svc.Count("b"); n != 0 {
		t.Fatal("a refused call ran")
	}
	// Scopes: bob's key k-m is his own.
	resp, err := e.Client.UnaryCall(grpctest.CallCtx("k-m", "bob"), grpctest.Req("b"))
	if err != nil || resp.GetUsername() != "b#1" {
		t.Fatalf("bob: %v, %v", resp, err)
	}
}

func TestStatusPolicy(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), nil)
	// A final error is stored and replayed.
	for range 3 {
		_, err := e.Client.UnaryCall(grpctest.CallCtx("k-e", "alice"), grpctest.Req("e-charge"))
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "bad amount" {
			t.Fatalf("stored error: %v", err)
		}
	}
	if n := e.Svc.Count("e-charge"); n != 1 {
		t.Fatalf("InvalidArgument ran %d times", n)
	}
	// A retryable error is not stored: the retry runs.
	if _, err := e.Client.UnaryCall(grpctest.CallCtx("k-u", "alice"), grpctest.Req("u-charge")); status.Code(err) != codes.Unavailable {
		t.Fatalf("first: %v", err)
	}
	resp, err := e.Client.UnaryCall(grpctest.CallCtx("k-u", "alice"), grpctest.Req("u-charge"))
	if err != nil || resp.GetUsername() != "u-charge#2" {
		t.Fatalf("retry: %v, %v", resp, err)
	}
}

func TestPanicReleases(t *testing.T) {
	t.Parallel()
	store := newMem(t)
	in, err := grpcidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "a", "idempotency-key", "k-p"))
	info := &grpc.UnaryServerInfo{FullMethod: testpb.TestService_UnaryCall_FullMethodName}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("panic swallowed")
			}
		}()
		in.Unary()(ctx, grpctest.Req("p"), info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	ran := false
	_, err = in.Unary()(ctx, grpctest.Req("p"), info, func(context.Context, any) (any, error) {
		ran = true
		return &testpb.SimpleResponse{}, nil
	})
	if err != nil || !ran {
		t.Fatalf("after a panic the retry must run: ran=%v err=%v", ran, err)
	}
}

// TestKeyFromRequest: AIP-155 request_id style, the key read from the message.
func TestKeyFromRequest(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), &grpcidem.Config{
		KeyFunc: func(_ context.Context, _ string, r any) (string, bool) {
			id := r.(*testpb.SimpleRequest).GetPayload().GetBody()
			return string(id), len(id) > 0
		},
	})
	for range 3 {
		if _, err := e.Client.UnaryCall(grpctest.CallCtx("", "alice"), grpctest.Req("request-id-7")); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.Svc.Count("request-id-7"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

// TestClientInterceptorKeepsKeyAcrossRetries: gRPC's own retry policy
// resends the call with the key the interceptor put in once.
func TestClientInterceptorKeepsKeyAcrossRetries(t *testing.T) {
	t.Parallel()
	const sc = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
	  "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	e := startRig(t, newMem(t), nil,
		grpc.WithDefaultServiceConfig(sc),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(nil)))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice")
	resp, err := e.Client.UnaryCall(ctx, grpctest.Req("u-retry"))
	if err != nil || resp.GetUsername() != "u-retry#2" {
		t.Fatalf("%v, %v", resp, err)
	}
	if _, err := e.Client.UnaryCall(ctx, grpctest.Req("other")); err != nil {
		t.Fatal(err)
	}
	keys := e.Svc.Keys()
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] == keys[2] {
		t.Fatalf("keys seen by the server: %q; want the same key for both attempts and a new one for the next call", keys)
	}
}
