package otelidem_test

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
	"github.com/idemkit/idem/otelidem"
	"github.com/idemkit/idem/otelidem/internal/oteltest"
)

// Each protocol's work span carries the code in its own semantic
// convention's attribute, and its calls are counted in its own metrics.
func TestProtocols(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	reader := sdkmetric.NewManualReader()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	o, err := otelidem.New(&otelidem.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	work := func(p observe.Protocol, status int, err error) {
		ctx, end := o.StartPhase(context.Background(), idem.PhaseWork, "0123456789abcdef")
		o.StoreCall(ctx, observe.StoreCall{Protocol: p, Op: idem.MethodMarkStarted})
		end(observe.PhaseEnd{Protocol: p, Status: status, Err: err})
		o.Decided(ctx, observe.Event{Protocol: p, Decision: observe.DecisionExecuted, Status: status})
	}
	work(observe.ProtocolHTTP, 201, nil)
	work(observe.ProtocolGRPC, 5, nil)
	work(observe.ProtocolGRPC, 0, nil)
	work(observe.ProtocolGRPC, 0, errors.New("handler panicked"))
	work(observe.ProtocolConnect, 10, nil)
	work(observe.ProtocolConnect, 0, nil)

	type want struct {
		key attribute.Key
		val string // "": absent
	}
	wants := []struct {
		status, grpc, connect, system string
	}{
		{"201", "", "", ""},
		{"", "5", "", "grpc"},
		{"", "0", "", "grpc"},
		{"", "", "", "grpc"},
		{"", "", "aborted", "connect_rpc"},
		{"", "", "", "connect_rpc"},
	}
	ended := spans.Ended()
	if len(ended) != len(wants) {
		t.Fatalf("%d spans", len(ended))
	}
	for i, w := range wants {
		for _, c := range []want{{otelidem.StatusAttr, w.status}, {otelidem.GRPCStatusAttr, w.grpc}, {otelidem.ConnectErrorAttr, w.connect}, {otelidem.RPCSystemAttr, w.system}} {
			v, ok := oteltest.Attr(ended[i], c.key)
			got := ""
			if ok {
				got = v.String()
			}
			if ok != (c.val != "") || got != c.val {
				t.Errorf("span %d: %s = %q (set %v), want %q", i, c.key, got, ok, c.val)
			}
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{} // metric name / rpc.system → count
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					got[m.Name+"/"+system(p.Attributes)] += p.Value
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					got[m.Name+"/"+system(p.Attributes)] += int64(p.Count)
				}
			}
		}
	}
	for k, n := range map[string]int64{
		otelidem.RequestsMetric + "/": 1, otelidem.StoreDurationMetric + "/": 1,
		otelidem.RPCRequestsMetric + "/grpc": 3, otelidem.RPCStoreDurationMetric + "/grpc": 3,
		otelidem.RPCRequestsMetric + "/connect_rpc": 2, otelidem.RPCStoreDurationMetric + "/connect_rpc": 2,
	} {
		if got[k] != n {
			t.Errorf("%s: %d, want %d (all: %v)", k, got[k], n, got)
		}
	}
	if len(got) != 6 {
		t.Errorf("series %v", got)
	}
}

// system is the set's rpc.system, or "".
func system(s attribute.Set) string {
	if v, ok := s.Value(otelidem.RPCSystemAttr); ok {
		return v.String()
	}
	return ""
}
