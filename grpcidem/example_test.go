package grpcidem_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"

	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/memstore"
)

// payments is a service that is not idempotent by itself: every call
// creates a new payment.
type payments struct {
	testpb.UnimplementedTestServiceServer
	n int
}

func (p *payments) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	p.n++
	return &testpb.SimpleResponse{Username: fmt.Sprintf("payment %d", p.n)}, nil
}

func Example() {
	store := memstore.New(nil)
	defer store.Close()
	in, err := grpcidem.New(store, nil)
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()))
	testpb.RegisterTestServiceServer(srv, &payments{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go srv.Serve(ln)
	defer srv.Stop()

	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testpb.NewTestServiceClient(conn)

	// The same key twice: one payment, and the retry is marked as a replay.
	ctx := metadata.AppendToOutgoingContext(context.Background(),
		"authorization", "Bearer alice", "idempotency-key", "order-1001")
	for range 2 {
		var hdr metadata.MD
		resp, err := client.UnaryCall(ctx, &testpb.SimpleRequest{}, grpc.Header(&hdr))
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.GetUsername(), hdr.Get(grpcidem.ReplayedMetadataKey))
	}
	// Output:
	// payment 1 []
	// payment 1 [true]
}
