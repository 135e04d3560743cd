package grpcidem_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/rpcidem/grpctest"
	"github.com/idemkit/idem/observe"
)

// gatedService counts its executions; each waits for gate to close.
type gatedService struct {
	testpb.UnimplementedTestServiceServer
	calls   atomic.Int64
	started chan struct{} // one value per execution
	gate    chan struct{}
}

func (s *gatedService) UnaryCall(ctx context.Context, in *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	n := s.calls.Add(1)
	s.started <- struct{}{}
	<-s.gate
	return &testpb.SimpleResponse{Username: "run#" + strconv.FormatInt(n, 10)}, nil
}

func serveGated(t *testing.T, cfg *grpcidem.Config, dial ...grpc.DialOption) (*gatedService, testpb.TestServiceClient) {
	t.Helper()
	in, err := grpcidem.New(newMem(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc := &gatedService{started: make(chan struct{}, 16), gate: make(chan struct{})}
	return svc, grpctest.Dial(t, svc, grpc.UnaryInterceptor(in.Unary()), dial...)
}

// TestQuotedKeyIsOneKey: over a real connection, the sf-string spelling
// of a key ("order-1") and the bare one (order-1) name one key, as in
// HTTP and Connect: concurrent calls with either run once.
func TestQuotedKeyIsOneKey(t *testing.T) {
	t.Parallel()
	e := startRig(t, newMem(t), nil)
	var wg sync.WaitGroup
	names := make([]string, 8)
	for i := range names {
		key := "order-1"
		if i%2 == 1 {
			key = `"order-1"`
		}
		wg.Go(func() {
			ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice", "idempotency-key", key))
			resp, err := e.Client.UnaryCall(ctx, grpctest.Req("quoted"))
			for status.Code(err) == codes.Aborted { // in flight: retry with the same key
				time.Sleep(10 * time.Millisecond)
				resp, err = e.Client.UnaryCall(ctx, grpctest.Req("quoted"))
			}
			if err != nil {
				t.Errorf("%s: %v", key, err)
				return
			}
			names[i] = resp.GetUsername()
		})
	}
	wg.Wait()
	if n := e.Svc.Count("quoted"); n != 1 {
		t.Fatalf("ran %d times for one key in two spellings", n)
	}
	for _, bad := range []string{`"order-1`, `"a b"`, `"x";p=1`, `"\q"`} {
		ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice", "idempotency-key", bad))
		if _, err := e.Client.UnaryCall(ctx, grpctest.Req("bad")); status.Code(err) != codes.InvalidArgument {
			t.Errorf("%q: %v, want InvalidArgument", bad, err)
		}
	}
}

// TestInFlightPushback: the Aborted answer for a key whose first call
// still runs carries grpc-retry-pushback-ms, so gRPC's own retry policy
// waits that long instead of spending its attempts at its own backoff
// (here far shorter than the first call): the retried call gets the
// first call's answer, and the handler runs once.
func TestInFlightPushback(t *testing.T) {
	t.Parallel()
	const sc = `{"methodConfig":[{"name":[{"service":"grpc.testing.TestService"}],
	  "retryPolicy":{"maxAttempts":2,"initialBackoff":"0.001s","maxBackoff":"0.001s","backoffMultiplier":1,"retryableStatusCodes":["ABORTED"]}}]}`
	ctx := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "Bearer alice", "idempotency-key", "push-1"))
	inFlight := make(chan struct{}, 16)
	obs := observe.ObserverFunc(func(_ context.Context, e observe.Event) {
		if e.Decision == observe.DecisionInFlight {
			inFlight <- struct{}{}
		}
	})
	svc, client := serveGated(t, &grpcidem.Config{InFlightRetryAfter: 2 * time.Second, Observer: obs}, grpc.WithDefaultServiceConfig(sc))

	// Without a retry policy, the trailer is there.
	plainSvc, plain := serveGated(t, nil)
	go plain.UnaryCall(ctx, grpctest.Req("x"))
	<-plainSvc.started
	var tr metadata.MD
	if _, err := plain.UnaryCall(ctx, grpctest.Req("x"), grpc.Trailer(&tr)); status.Code(err) != codes.Aborted {
		t.Fatalf("in flight: %v, want Aborted", err)
	}
	if v := tr.Get(grpcidem.RetryPushbackMetadataKey); len(v) != 1 || v[0] == "0" {
		t.Fatalf("trailer %s = %q, want one positive value", grpcidem.RetryPushbackMetadataKey, v)
	}
	close(plainSvc.gate)
	first := make(chan error, 1)
	go func() {
		_, err := client.UnaryCall(ctx, grpctest.Req("x"))
		first <- err
	}()
	<-svc.started

	// With the retry policy: the second attempt waits for the pushback.
	second := make(chan error, 1)
	var resp *testpb.SimpleResponse
	go func() {
		var err error
		resp, err = client.UnaryCall(ctx, grpctest.Req("x"))
		second <- err
	}()
	<-inFlight      // its first attempt was answered Aborted
	close(svc.gate) // the first call finishes while the retry waits
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if err := <-second; err != nil {
		t.Fatalf("retried call: %v; the retry policy did not wait for the pushback", err)
	}
	if resp.GetUsername() != "run#1" || svc.calls.Load() != 1 {
		t.Fatalf("got %q after %d executions, want the first call's answer", resp.GetUsername(), svc.calls.Load())
	}
}
