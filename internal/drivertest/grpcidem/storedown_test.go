package grpcidem_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpcidem"
	_ "github.com/idemkit/idem/internal/drivertest/sqlenv" // the pgx driver
	"github.com/idemkit/idem/internal/rpcidem/grpctest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

// proxiedPostgres returns a migrated sqlstore on a fresh PostgreSQL
// database reached through a fault proxy, closed when the test ends.
// startRig serves grpctest's Service behind grpcidem's unary interceptor
// on store with cfg.
func startRig(tb testing.TB, store idem.Store, cfg *grpcidem.Config) *grpctest.Env {
	tb.Helper()
	in, err := grpcidem.New(store, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return grpctest.Serve(tb, grpc.UnaryInterceptor(in.Unary()))
}

func proxiedPostgres(t *testing.T) (*sqlstore.Store, *testenv.FaultProxy) {
	t.Helper()
	testenv.Postgres.Need(t)
	_, dsn := testenv.PostgresDB(t)
	p := testenv.NewFaultProxy(t, "127.0.0.1:5432")
	db, err := sql.Open("pgx", testenv.Redirect(dsn, p.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	store, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres, Table: testenv.Name("grpc")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return store, p
}

// TestStoreDown: a store behind a refused connection answers Unavailable,
// and the handler never runs unprotected.
func TestStoreDown(t *testing.T) {
	t.Parallel()
	store, p := proxiedPostgres(t)
	e := startRig(t, store, nil)
	if _, err := e.Client.UnaryCall(grpctest.CallCtx("k-ok", "alice"), grpctest.Req("before")); err != nil {
		t.Fatal(err)
	}
	p.Set(testenv.Refuse)
	_, err := e.Client.UnaryCall(grpctest.CallCtx("k-down", "alice"), grpctest.Req("during"))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("store down: %v", err)
	}
	if n := e.Svc.Count("during"); n != 0 {
		t.Fatal("ran without protection")
	}
	p.Set(testenv.Pass)
	if _, err := e.Client.UnaryCall(grpctest.CallCtx("k-down", "alice"), grpctest.Req("during")); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after the outage: %v", err)
	}
	if n := e.Svc.Count("during"); n != 1 {
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
	store, p := proxiedPostgres(t)
	e := startRig(t, store, &grpcidem.Config{StoreTimeout: 500 * time.Millisecond})
	if _, err := e.Client.UnaryCall(grpctest.CallCtx("k-warm", "alice"), grpctest.Req("warm")); err != nil {
		t.Fatal(err)
	}
	const hang = 30 * time.Second // a hang detector, not a timing assertion
	p.Set(testenv.BlackHole)
	t0 := time.Now()
	_, err := e.Client.UnaryCall(grpctest.CallCtx("k-begin", "alice"), grpctest.Req("begin"))
	if status.Code(err) != codes.Unavailable || time.Since(t0) > hang {
		t.Fatalf("Begin black-holed: %v after %v; want Unavailable", err, time.Since(t0))
	}
	if n := e.Svc.Count("begin"); n != 0 {
		t.Fatal("ran without protection")
	}
	p.Set(testenv.Pass)
	e.Svc.SetHook(func(body string) {
		if body == "complete" {
			p.Set(testenv.BlackHole)
		}
	})
	t0 = time.Now()
	_, err = e.Client.UnaryCall(grpctest.CallCtx("k-complete", "alice"), grpctest.Req("complete"))
	if status.Code(err) != codes.Unavailable || time.Since(t0) > hang {
		t.Fatalf("Complete black-holed: %v after %v; want Unavailable", err, time.Since(t0))
	}
	p.Set(testenv.Pass)
	for {
		_, err = e.Client.UnaryCall(grpctest.CallCtx("k-complete", "alice"), grpctest.Req("complete"))
		if status.Code(err) != codes.Unavailable {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if status.Code(err) != codes.Aborted || e.Svc.Count("complete") != 1 {
		t.Fatalf("retry after the lost Complete: %v, %d executions; want Aborted (in flight), one execution", err, e.Svc.Count("complete"))
	}
}
