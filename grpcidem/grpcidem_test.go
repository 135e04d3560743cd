package grpcidem_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/memstore"
)

// service counts executions per request body; the body's first byte
// chooses a behaviour: 'e' answers InvalidArgument, 'u' answers Unavailable
// on the first execution, 's' sleeps 300ms, 'p' panics.
type service struct {
	testpb.UnimplementedTestServiceServer
	mu    sync.Mutex
	calls map[string]int
	keys  []string
	hook  func(body string) // when set, runs once the call has executed, before it answers
}

func (s *service) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	body := string(in.GetPayload().GetBody())
	md, _ := metadata.FromIncomingContext(ctx)
	s.mu.Lock()
	s.calls[body]++
	n := s.calls[body]
	s.keys = append(s.keys, md.Get("idempotency-key")...)
	hook := s.hook
	s.mu.Unlock()
	if hook != nil {
		hook(body)
	}
	switch {
	case len(body) > 0 && body[0] == 'e':
		return nil, status.Error(codes.InvalidArgument, "bad amount")
	case len(body) > 0 && body[0] == 'u' && n == 1:
		return nil, status.Error(codes.Unavailable, "try again")
	case len(body) > 0 && body[0] == 's':
		time.Sleep(300 * time.Millisecond)
	case len(body) > 0 && body[0] == 'p':
		panic("handler bug")
	}
	// Header metadata only on success: a header sent before an error commits
	// the call, and gRPC's retry policy would not retry it.
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-execution", strconv.Itoa(n)))
	return &testpb.SimpleResponse{Username: fmt.Sprintf("%s#%d", body, n)}, nil
}

func (s *service) count(body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[body]
}

type env struct {
	svc    *service
	client testpb.TestServiceClient
	conn   *grpc.ClientConn
}

func start(t *testing.T, store idem.Store, cfg *grpcidem.Config, dial ...grpc.DialOption) *env {
	t.Helper()
	in, err := grpcidem.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, grpc.UnaryInterceptor(in.Unary()), dial...)
}

// serve runs the test service on a server with opt, and dials it.
func serve(t *testing.T, opt grpc.ServerOption, dial ...grpc.DialOption) *env {
	t.Helper()
	svc := &service{calls: map[string]int{}}
	srv := grpc.NewServer(opt)
	testpb.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &env{svc: svc, client: testpb.NewTestServiceClient(conn), conn: conn}
}

func callCtx(key, caller string) context.Context {
	kv := []string{"authorization", "Bearer " + caller}
	if key != "" {
		kv = append(kv, "idempotency-key", key)
	}
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
}

func req(body string) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}

func newMem(t *testing.T) idem.Store {
	s := memstore.New(nil)
	t.Cleanup(func() { s.Close() })
	return s
}

func TestReplay(t *testing.T) {
	t.Parallel()
	e := start(t, newMem(t), nil)
	var first *testpb.SimpleResponse
	for i := range 5 {
		var hdr metadata.MD
		resp, err := e.client.UnaryCall(callCtx("k1", "alice"), req("charge"), grpc.Header(&hdr))
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
	if n := e.svc.count("charge"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	e := start(t, newMem(t), nil)
	var wg sync.WaitGroup
	var ok, aborted atomic.Int64
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := e.client.UnaryCall(callCtx("k-conc", "alice"), req("slow-charge"))
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
	if n := e.svc.count("slow-charge"); n != 1 {
		t.Fatalf("%d executions of one key", n)
	}
	if ok.Load() == 0 || ok.Load()+aborted.Load() != 50 {
		t.Fatalf("ok %d aborted %d", ok.Load(), aborted.Load())
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	e := start(t, newMem(t), &grpcidem.Config{RequireKey: true})
	if _, err := e.client.UnaryCall(callCtx("k-m", "alice"), req("a")); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		ctx  context.Context
		body string
		want codes.Code
	}{
		{"mismatch", callCtx("k-m", "alice"), "b", codes.FailedPrecondition},
		{"no key", callCtx("", "alice"), "a", codes.InvalidArgument},
		{"long key", callCtx(strings.Repeat("k", 300), "alice"), "a", codes.InvalidArgument},
		{"two keys", metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "x", "idempotency-key", "a", "idempotency-key", "b")), "a", codes.InvalidArgument},
		{"no caller", metadata.NewOutgoingContext(context.Background(), metadata.Pairs("idempotency-key", "k-anon")), "a", codes.InvalidArgument},
	}
	for _, c := range cases {
		_, err := e.client.UnaryCall(c.ctx, req(c.body))
		if got := status.Code(err); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := e.svc.count("b"); n != 0 {
		t.Fatal("a refused call ran")
	}
	// Scopes: bob's key k-m is his own.
	resp, err := e.client.UnaryCall(callCtx("k-m", "bob"), req("b"))
	if err != nil || resp.GetUsername() != "b#1" {
		t.Fatalf("bob: %v, %v", resp, err)
	}
}

func TestStatusPolicy(t *testing.T) {
	t.Parallel()
	e := start(t, newMem(t), nil)
	// A final error is stored and replayed.
	for range 3 {
		_, err := e.client.UnaryCall(callCtx("k-e", "alice"), req("e-charge"))
		if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != "bad amount" {
			t.Fatalf("stored error: %v", err)
		}
	}
	if n := e.svc.count("e-charge"); n != 1 {
		t.Fatalf("InvalidArgument ran %d times", n)
	}
	// A retryable error is not stored: the retry runs.
	if _, err := e.client.UnaryCall(callCtx("k-u", "alice"), req("u-charge")); status.Code(err) != codes.Unavailable {
		t.Fatalf("first: %v", err)
	}
	resp, err := e.client.UnaryCall(callCtx("k-u", "alice"), req("u-charge"))
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
		in.Unary()(ctx, req("p"), info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	ran := false
	_, err = in.Unary()(ctx, req("p"), info, func(context.Context, any) (any, error) {
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
	e := start(t, newMem(t), &grpcidem.Config{
		KeyFunc: func(_ context.Context, _ string, r any) (string, bool) {
			id := r.(*testpb.SimpleRequest).GetPayload().GetBody()
			return string(id), len(id) > 0
		},
	})
	for range 3 {
		if _, err := e.client.UnaryCall(callCtx("", "alice"), req("request-id-7")); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.svc.count("request-id-7"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

// TestClientInterceptorKeepsKeyAcrossRetries: gRPC's own retry policy
// resends the call with the key the interceptor put in once.
func TestClientInterceptorKeepsKeyAcrossRetries(t *testing.T) {
	t.Parallel()
	const sc = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
	  "retryPolicy":{"maxAttempts":3,"initialBackoff":"0.01s","maxBackoff":"0.05s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`
	e := start(t, newMem(t), nil,
		grpc.WithDefaultServiceConfig(sc),
		grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(nil)))
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer alice")
	resp, err := e.client.UnaryCall(ctx, req("u-retry"))
	if err != nil || resp.GetUsername() != "u-retry#2" {
		t.Fatalf("%v, %v", resp, err)
	}
	if _, err := e.client.UnaryCall(ctx, req("other")); err != nil {
		t.Fatal(err)
	}
	e.svc.mu.Lock()
	keys := append([]string(nil), e.svc.keys...)
	e.svc.mu.Unlock()
	if len(keys) != 3 || keys[0] != keys[1] || keys[1] == keys[2] {
		t.Fatalf("keys seen by the server: %q; want the same key for both attempts and a new one for the next call", keys)
	}
}
