package connectidem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/memstore"
)

func Example() {
	store := memstore.New(nil)
	defer store.Close()
	in, err := connectidem.New(store, nil)
	if err != nil {
		panic(err)
	}
	payments := 0
	const proc = "/grpc.testing.TestService/UnaryCall"
	mux := http.NewServeMux()
	mux.Handle(proc, connect.NewUnaryHandler(proc,
		func(ctx context.Context, req *connect.Request[testpb.SimpleRequest]) (*connect.Response[testpb.SimpleResponse], error) {
			payments++
			return connect.NewResponse(&testpb.SimpleResponse{Username: fmt.Sprintf("payment %d", payments)}), nil
		}, connect.WithInterceptors(in)))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	client := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](srv.Client(), srv.URL+proc)
	req := connect.NewRequest(&testpb.SimpleRequest{})
	req.Header().Set("Authorization", "Bearer alice")
	req.Header().Set("Idempotency-Key", `"order-1001"`)
	for range 2 {
		resp, err := client.CallUnary(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Println(resp.Msg.GetUsername(), "replayed:", resp.Header().Get(connectidem.ReplayedHeader) == "true")
	}
	// Output:
	// payment 1 replayed: false
	// payment 1 replayed: true
}
