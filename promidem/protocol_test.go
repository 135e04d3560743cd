package promidem_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
	"github.com/idemkit/idem/promidem"
)

// RPC calls are counted under the RPC names with their system, never
// under HTTP's; each protocol's series appear at its
// first call, all at zero.
func TestProtocols(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewPedanticRegistry()
	m, err := promidem.New(reg)
	if err != nil {
		t.Fatal(err)
	}
	if got := labels(t, reg, "idem_rpc_requests_total", "outcome"); len(got) != 0 {
		t.Fatalf("RPC series before an RPC call: %v", got)
	}
	ctx := context.Background()
	for _, p := range []observe.Protocol{observe.ProtocolGRPC, observe.ProtocolGRPC, observe.ProtocolConnect} {
		m.StoreCall(ctx, observe.StoreCall{Protocol: p, Op: idem.MethodBegin})
		m.Decided(ctx, observe.Event{Protocol: p, Decision: observe.DecisionAcquired})
		m.Decided(ctx, observe.Event{Protocol: p, Decision: observe.DecisionExecuted})
	}
	m.Decided(ctx, observe.Event{Protocol: observe.ProtocolHTTP, Decision: observe.DecisionReplayed})

	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"idem_rpc_requests_total", "rpc_system", "grpc", 2},
		{"idem_rpc_requests_total", "rpc_system", "connect", 1},
		{"idem_rpc_store_duration_seconds", "rpc_system", "grpc", 2},
		{"idem_rpc_store_duration_seconds", "rpc_system", "connect", 1},
		{"idem_http_requests_total", "outcome", "executed", 0},
		{"idem_http_requests_total", "outcome", "replayed", 1},
		{"idem_http_store_duration_seconds", "op", "begin", 0},
	} {
		if got := total(t, reg, c.name, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	// All of a protocol's series exist once it was seen: 13 outcomes for
	// each of grpc and connect.
	if got := labels(t, reg, "idem_rpc_requests_total", "outcome"); len(got) != 26 {
		t.Errorf("%d RPC outcome series", len(got))
	}
}

// total sums the series of family name whose label has value (for a
// histogram, their sample counts).
func total(t *testing.T, g prometheus.Gatherer, name, label, value string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					found = true
					if h := m.GetHistogram(); h != nil {
						sum += float64(h.GetSampleCount())
					} else {
						sum += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	if !found {
		t.Fatalf("no %s{%s=%q}", name, label, value)
	}
	return sum
}
