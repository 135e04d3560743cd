package connectidem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/idemkit/idem/connectidem"
	"github.com/idemkit/idem/memstore"
)

const procedure = "/grpc.testing.TestService/UnaryCall"

type env struct {
	client *connect.Client[testpb.SimpleRequest, testpb.SimpleResponse]
	mu     sync.Mutex
	calls  map[string]int
	keys   []string
	gate   chan struct{} // closed to let slow calls finish
}

func (e *env) count(body string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.calls[body]
}

// start serves one Connect procedure whose behaviour the body's first byte
// chooses: 'e' InvalidArgument with a detail, 'u' Unavailable on the first
// call, 's' slow; otherwise a response naming the execution.
func start(t *testing.T, cfg *connectidem.Config, client ...connect.ClientOption) *env {
	t.Helper()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	in, err := connectidem.New(store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{calls: map[string]int{}, gate: make(chan struct{})}
	h := connect.NewUnaryHandler(procedure, func(ctx context.Context, req *connect.Request[testpb.SimpleRequest]) (*connect.Response[testpb.SimpleResponse], error) {
		body := string(req.Msg.GetPayload().GetBody())
		e.mu.Lock()
		e.calls[body]++
		n := e.calls[body]
		e.keys = append(e.keys, req.Header().Get("Idempotency-Key"))
		e.mu.Unlock()
		switch {
		case len(body) > 0 && body[0] == 'e':
			cerr := connect.NewError(connect.CodeInvalidArgument, errors.New("bad amount"))
			d, _ := connect.NewErrorDetail(&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "amount"}}})
			cerr.AddDetail(d)
			return nil, cerr
		case len(body) > 0 && body[0] == 'u' && n == 1:
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("try again"))
		case len(body) > 0 && body[0] == 's':
			<-e.gate
		}
		resp := connect.NewResponse(&testpb.SimpleResponse{Username: fmt.Sprintf("%s#%d", body, n)})
		resp.Header().Set("X-Execution", fmt.Sprint(n))
		return resp, nil
	}, connect.WithInterceptors(in))
	mux := http.NewServeMux()
	mux.Handle(procedure, h)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	e.client = connect.NewClient[testpb.SimpleRequest, testpb.SimpleResponse](srv.Client(), srv.URL+procedure, client...)
	return e
}

func call(e *env, key, caller, body string) (*connect.Response[testpb.SimpleResponse], error) {
	req := connect.NewRequest(&testpb.SimpleRequest{Payload: &testpb.Payload{Body: []byte(body)}})
	if caller != "" {
		req.Header().Set("Authorization", "Bearer "+caller)
	}
	if key != "" {
		req.Header().Set("Idempotency-Key", key)
	}
	return e.client.CallUnary(context.Background(), req)
}

func TestReplay(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	first, err := call(e, `"k1"`, "alice", "charge")
	if err != nil {
		t.Fatal(err)
	}
	if first.Header().Get(connectidem.ReplayedHeader) != "" {
		t.Fatal("first answer marked as replayed")
	}
	for range 3 {
		again, err := call(e, "k1", "alice", "charge") // bare and quoted forms are one key
		if err != nil {
			t.Fatal(err)
		}
		if again.Msg.GetUsername() != first.Msg.GetUsername() || again.Header().Get(connectidem.ReplayedHeader) != "true" ||
			again.Header().Get("X-Execution") != "1" {
			t.Fatalf("replay: %v %v", again.Msg, again.Header())
		}
	}
	if n := e.count("charge"); n != 1 {
		t.Fatalf("%d executions", n)
	}
}

func TestStatusPolicy(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for range 3 {
		_, err := call(e, "k-e", "alice", "e-charge")
		var ce *connect.Error
		if !errors.As(err, &ce) || ce.Code() != connect.CodeInvalidArgument || ce.Message() != "bad amount" || len(ce.Details()) != 1 {
			t.Fatalf("stored error: %v", err)
		}
	}
	if n := e.count("e-charge"); n != 1 {
		t.Fatalf("InvalidArgument ran %d times", n)
	}
	if _, err := call(e, "k-u", "alice", "u-charge"); connect.CodeOf(err) != connect.CodeUnavailable {
		t.Fatalf("first: %v", err)
	}
	resp, err := call(e, "k-u", "alice", "u-charge")
	if err != nil || resp.Msg.GetUsername() != "u-charge#2" {
		t.Fatalf("retry after Unavailable: %v, %v", resp, err)
	}
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	e := start(t, &connectidem.Config{RequireKey: true})
	if _, err := call(e, "k-m", "alice", "a"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, key, caller, body string
		want                    connect.Code
	}{
		{"mismatch", "k-m", "alice", "b", connect.CodeFailedPrecondition},
		{"no key", "", "alice", "a", connect.CodeInvalidArgument},
		{"bad key", `"unterminated`, "alice", "a", connect.CodeInvalidArgument},
		{"no caller", "k-anon", "", "a", connect.CodeInvalidArgument},
	} {
		if _, err := call(e, c.key, c.caller, c.body); connect.CodeOf(err) != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if e.count("b") != 0 {
		t.Fatal("a refused call ran")
	}
	if resp, err := call(e, "k-m", "bob", "b"); err != nil || resp.Msg.GetUsername() != "b#1" {
		t.Fatalf("bob's own key: %v, %v", resp, err)
	}
}

func TestConcurrentDuplicates(t *testing.T) {
	e := start(t, nil)
	var wg sync.WaitGroup
	var ok, aborted atomic.Int64
	firstIn := make(chan struct{})
	go func() {
		defer close(firstIn)
		for e.count("slow") == 0 {
			runtimeGosched()
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := call(e, "k-c", "alice", "slow"); err == nil {
			ok.Add(1)
		}
	}()
	<-firstIn
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := call(e, "k-c", "alice", "slow")
			var ce *connect.Error
			if errors.As(err, &ce) && ce.Code() == connect.CodeAborted {
				for _, d := range ce.Details() {
					if v, derr := d.Value(); derr == nil {
						if _, isRI := v.(*errdetails.RetryInfo); isRI {
							aborted.Add(1)
						}
					}
				}
				return
			}
			t.Errorf("duplicate during the first call: %v", err)
		}()
	}
	for aborted.Load() < 20 && !t.Failed() {
		runtimeGosched()
	}
	close(e.gate)
	wg.Wait()
	if n := e.count("slow"); n != 1 || ok.Load() != 1 || aborted.Load() != 20 {
		t.Fatalf("executions %d, ok %d, aborted with RetryInfo %d", n, ok.Load(), aborted.Load())
	}
}

func TestClientInterceptor(t *testing.T) {
	t.Parallel()
	e := start(t, nil, connect.WithInterceptors(connectidem.ClientInterceptor{}))
	for _, body := range []string{"x", "y"} {
		if _, err := call(e, "", "alice", body); err != nil {
			t.Fatal(err)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.keys) != 2 || e.keys[0] == "" || e.keys[0] == e.keys[1] {
		t.Fatalf("keys: %q", e.keys)
	}
}

func runtimeGosched() { time.Sleep(time.Millisecond) }
