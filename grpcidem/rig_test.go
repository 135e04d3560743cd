package grpcidem_test

import (
	"testing"

	"google.golang.org/grpc"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/grpcidem"
	"github.com/idemkit/idem/internal/rpcidem/grpctest"
)

// startRig serves grpctest's Service behind grpcidem's unary interceptor
// on store with cfg, and dials it with dial.
func startRig(tb testing.TB, store idem.Store, cfg *grpcidem.Config, dial ...grpc.DialOption) *grpctest.Env {
	tb.Helper()
	in, err := grpcidem.New(store, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return grpctest.Serve(tb, grpc.UnaryInterceptor(in.Unary()), dial...)
}
