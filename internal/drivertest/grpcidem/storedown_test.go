package grpcidem_test

import (
	"context"
	"database/sql"
	"errors"
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

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpcidem"
	_ "github.com/idemkit/idem/internal/drivertest/sqlenv" // the pgx driver
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// The test service and its helpers are those of grpcidem/grpcidem_test.go,
// copied for the one test that needs PostgreSQL: keep the two in step.

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

// TestStoreDown: a store behind a refused connection answers Unavailable,
// and the handler never runs unprotected.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	testenv.Postgres.Need(t)
	_, dsn := testenv.PostgresDB(t)
	p := testenv.NewFaultProxy(t, "127.0.0.1:5432")
	db, err := sql.Open("pgx", testenv.Redirect(dsn, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres, Table: testenv.Name("grpc")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e := start(t, store, nil)
	if _, err := e.client.UnaryCall(callCtx("k-ok", "alice"), req("before")); err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.Refuse)
	_, err = e.client.UnaryCall(callCtx("k-down", "alice"), req("during"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("store down: %v", err)
	}
	if n := e.svc.count("during"); n != 0 {
		t.Fatal("ran without protection")
	}
	p.Set(testenv.Pass)
	if _, err := e.client.UnaryCall(callCtx("k-down", "alice"), req("during")); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after the outage: %v", err)
	}
	if n := e.svc.count("during"); n != 1 {
		t.Fatalf("%d executions after the outage", n)
	}
}

// TestStoreBlackHole: a store that accepts connections and never answers
// (PostgreSQL behind a black-holing TCP proxy) never hangs a call: past
// StoreTimeout, Begin answers Unavailable before the handler runs, and a
// Complete after the handler answered does too (the claim stays: the key
// never runs again while its lease lives).
func TestStoreBlackHole(t *testing.T) {
	t.Parallel()
	testenv.Postgres.Need(t)
	_, dsn := testenv.PostgresDB(t)
	p := testenv.NewFaultProxy(t, "127.0.0.1:5432")
	db, err := sql.Open("pgx", testenv.Redirect(dsn, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres, Table: testenv.Name("grpc")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	e := start(t, store, &grpcidem.Config{StoreTimeout: 500 * time.Millisecond})
	if _, err := e.client.UnaryCall(callCtx("k-warm", "alice"), req("warm")); err != nil {
		t.Fatal(err)
	}
	const hang = 30 * time.Second // a hang detector, not a timing assertion
	p.Set(testenv.BlackHole)
	t0 := time.Now()
	_, err = e.client.UnaryCall(callCtx("k-begin", "alice"), req("begin"))
	if status.Code(err) != codes.Unavailable || time.Since(t0) > hang {
		t.Fatalf("Begin black-holed: %v after %v; want Unavailable", err, time.Since(t0))
	}
	if n := e.svc.count("begin"); n != 0 {
		t.Fatal("ran without protection")
	}
	p.Set(testenv.Pass)
	e.svc.mu.Lock()
	e.svc.hook = func(body string) {
		if body == "complete" {
			p.Set(testenv.BlackHole)
		}
	}
	e.svc.mu.Unlock()
	t0 = time.Now()
	_, err = e.client.UnaryCall(callCtx("k-complete", "alice"), req("complete"))
	if status.Code(err) != codes.Unavailable || time.Since(t0) > hang {
		t.Fatalf("Complete black-holed: %v after %v; want Unavailable", err, time.Since(t0))
	}
	p.Set(testenv.Pass)
	for {
		_, err = e.client.UnaryCall(callCtx("k-complete", "alice"), req("complete"))
		if status.Code(err) != codes.Unavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status.Code(err) != codes.Aborted || e.svc.count("complete") != 1 {
		t.Fatalf("retry after the lost Complete: %v, %d executions; want Aborted (in flight), one execution", err, e.svc.count("complete"))
	}
}
