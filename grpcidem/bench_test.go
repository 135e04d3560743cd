package grpcidem_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/memstore"
)

type benchService struct {
	testpb.UnimplementedTestServiceServer
}

func (benchService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Username: "ok"}, nil
}

// BenchmarkUnary compares a bare unary call over loopback with the same
// call through the interceptor on a memory store: first executions (a new
// key each) and replays (one key).
//
//	go test -run '^$' -bench BenchmarkUnary -count 6 ./grpcidem/
func BenchmarkUnary(b *testing.B) {
	store := memstore.New(nil)
	defer store.Close()
	in, err := grpcidem.New(store, nil)
	if err != nil {
		b.Fatal(err)
	}
	dial := func(b *testing.B, opts ...grpc.ServerOption) testpb.TestServiceClient {
		srv := grpc.NewServer(opts...)
		testpb.RegisterTestServiceServer(srv, benchService{})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go srv.Serve(ln)
		b.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		return testpb.NewTestServiceClient(conn)
	}
	bare := dial(b)
	guarded := dial(b, grpc.UnaryInterceptor(in.Unary()))
	req := &testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(`{"amount":4200}`)}}
	var seq atomic.Int64

	b.Run("bare", func(b *testing.B) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer a")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := bare.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("first", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer a",
				"idempotency-key", fmt.Sprint("k", seq.Add(1)))
			if _, err := guarded.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("replay", func(b *testing.B) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer a", "idempotency-key", "replayed")
		if _, err := guarded.UnaryCall(ctx, req); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		for b.Loop() {
			if _, err := guarded.UnaryCall(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
