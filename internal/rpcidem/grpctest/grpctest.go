package grpctest

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Service counts executions per request body; the body's first byte
// chooses a behaviour: 'e' answers InvalidArgument, 'u' answers Unavailable
// on the first execution, 's' sleeps 300ms, 'p' panics.
type Service struct {
	testpb.UnimplementedTestServiceServer
	mu    sync.Mutex
	calls map[string]int
	keys  []string
	hook  func(body string) // when set, runs once the call has executed, before it answers
}

// UnaryCall executes the call: see Service.
func (s *Service) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
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

// Count returns how many times a call with body has executed.
func (s *Service) Count(body string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[body]
}

// Keys returns the idempotency keys the executed calls carried, in order.
func (s *Service) Keys() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...)
}

// SetHook makes every later call run hook with its body once it has
// executed, before it answers.
func (s *Service) SetHook(hook func(body string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hook = hook
}

// Env is a served Service and a client dialled to it.
type Env struct {
	Svc    *Service
	Client testpb.TestServiceClient
}

// Serve runs the Service on a loopback server with opt, and dials it with
// dial; both stop when the test ends.
func Serve(tb testing.TB, opt grpc.ServerOption, dial ...grpc.DialOption) *Env {
	tb.Helper()
	svc := &Service{calls: map[string]int{}}
	return &Env{Svc: svc, Client: Dial(tb, svc, opt, dial...)}
}

// Dial runs svc on a loopback server with opt, and returns a client
// dialled to it with dial; both stop when the test ends.
func Dial(tb testing.TB, svc testpb.TestServiceServer, opt grpc.ServerOption, dial ...grpc.DialOption) testpb.TestServiceClient {
	tb.Helper()
	srv := grpc.NewServer(opt)
	testpb.RegisterTestServiceServer(srv, svc)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	go srv.Serve(ln)
	tb.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// CallCtx returns an outgoing context carrying caller's bearer token and,
// unless key is empty, the idempotency key.
func CallCtx(key, caller string) context.Context {
	kv := []string{"authorization", "Bearer " + caller}
	if key != "" {
		kv = append(kv, "idempotency-key", key)
	}
	return metadata.NewOutgoingContext(context.Background(), metadata.Pairs(kv...))
}

// Req returns a request with body as its payload.
func Req(body string) *testpb.SimpleRequest {
	return &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}}
}
