package connectidem_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"

	"connectrpc.com/connect"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/memstore"
)

// TestErrorTrailersReplayed: a stored error is replayed with the trailers
// the handler set, as a stored success is, over the Connect and the gRPC
// protocol (a real HTTP/2 server).
func TestErrorTrailersReplayed(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	in, err := connectidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[testpb.SimpleRequest]) (*connect.Response[testpb.SimpleResponse], error) {
		n := calls.Add(1)
		if ci, ok := connect.CallInfoForHandlerContext(ctx); ok {
			ci.ResponseTrailer().Set("X-Trail", "t"+strconv.FormatInt(n, 10))
		}
		cerr := connect.NewError(connect.CodeFailedPrecondition, errors.New("insufficient funds"))
		cerr.Meta().Set("X-Err", "e"+strconv.FormatInt(n, 10))
		return nil, cerr
	}, connect.WithInterceptors(in))
	mux := http.NewServeMux()
	mux.Handle(procedure, h)
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)

	for _, proto := range []struct {
		name string
		opts []connect.ClientOption
	}{{"connect", nil}, {"grpc", []connect.ClientOption{connect.WithGRPC()}}} {
		client := connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](srv.Client(), srv.URL+procedure, proto.opts...)
		send := func() *connect.Error {
			req := connect.NewRequest(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(proto.name)}})
			req.Header().Set("Authorization", "Bearer alice")
			req.Header().Set("Idempotency-Key", "trail-"+proto.name)
			_, err := client.CallUnary(context.Background(), req)
			var cerr *connect.Error
			if !errors.As(err, &cerr) || cerr.Code() != connect.CodeFailedPrecondition {
				t.Fatalf("%s: %v, want FailedPrecondition", proto.name, err)
			}
			return cerr
		}
		before := calls.Load()
		first, again := send(), send()
		if n := calls.Load() - before; n != 1 {
			t.Fatalf("%s: ran %d times", proto.name, n)
		}
		if again.Meta().Get(connectidem.ReplayedHeader) != "true" {
			t.Fatalf("%s: the second answer is not a replay: %v", proto.name, again.Meta())
		}
		for _, k := range []string{"X-Trail", "X-Err"} {
			if want := first.Meta().Get(k); want == "" || again.Meta().Get(k) != want {
				t.Errorf("%s: %s = %q on the first answer, %q on the replay", proto.name, k, want, again.Meta().Get(k))
			}
		}
	}
}
