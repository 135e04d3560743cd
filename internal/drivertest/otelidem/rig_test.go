package otelidem_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/otelidem"
)

// The rig of otelidem/otelidem_test.go, copied for the fault test (it needs
// Redis, which the otelidem module does not require): keep the two in step.

const scope = "Bearer otel-test"

// rawPrefix starts every raw key of these tests: no attribute may hold it.
const rawPrefix = "raw-otel-key-91d3"

type rig struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tracer trace.Tracer
	h      http.Handler
}

// newRig is the middleware over memstore, observed by otelidem, inside a
// "request" span as server instrumentation would start; the handler
// starts a "handler" span of its own.
func newRig(t *testing.T, wrap func(idem.Store) idem.Store, cfg httpidem.Config, handler http.HandlerFunc) *rig {
	t.Helper()
	rg := &rig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rg.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rg.reader))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
	rg.tracer = tp.Tracer("test")
	obs, err := otelidem.New(&otelidem.Config{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	ms := memstore.New(&memstore.Config{SweepInterval: -1})
	t.Cleanup(func() { ms.Close() })
	var s idem.Store = ms
	if wrap != nil {
		s = wrap(ms)
	}
	cfg.Observer = obs
	cfg.Logger = slog.New(slog.DiscardHandler)
	mw, err := httpidem.New(s, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if handler == nil {
		handler = func(w http.ResponseWriter, r *http.Request) {
			_, span := rg.tracer.Start(r.Context(), "handler")
			defer span.End()
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		}
	}
	inner := mw.Handler(handler)
	rg.h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, span := rg.tracer.Start(r.Context(), "request")
		defer span.End()
		inner.ServeHTTP(w, r.WithContext(ctx))
	})
	return rg
}

func (rg *rig) post(key, body string) int {
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))
	r.Header.Set("Authorization", scope)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	rg.h.ServeHTTP(w, r)
	return w.Code
}

func attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// trees groups the ended spans by trace: the request span and its
// descendants by name.
type tree struct {
	request  sdktrace.ReadOnlySpan
	children map[string]sdktrace.ReadOnlySpan // by name, children of request
	handler  sdktrace.ReadOnlySpan
}

func trees(t *testing.T, spans []sdktrace.ReadOnlySpan) map[trace.TraceID]*tree {
	t.Helper()
	out := map[trace.TraceID]*tree{}
	get := func(id trace.TraceID) *tree {
		if out[id] == nil {
			out[id] = &tree{children: map[string]sdktrace.ReadOnlySpan{}}
		}
		return out[id]
	}
	byID := map[trace.SpanID]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		byID[s.SpanContext().SpanID()] = s
	}
	for _, s := range spans {
		tr := get(s.SpanContext().TraceID())
		switch s.Name() {
		case "request":
			tr.request = s
		case "handler":
			tr.handler = s
		default:
			parent, ok := byID[s.Parent().SpanID()]
			if !ok || parent.Name() != "request" {
				t.Errorf("%s is not a child of the request span", s.Name())
			}
			if tr.children[s.Name()] != nil {
				t.Errorf("two %s spans in one request", s.Name())
			}
			tr.children[s.Name()] = s
		}
	}
	for _, tr := range out {
		if tr.request == nil {
			t.Fatal("a trace without its request span")
		}
		if tr.handler != nil {
			w := tr.children[otelidem.SpanWork]
			if w == nil || tr.handler.Parent().SpanID() != w.SpanContext().SpanID() {
				t.Error("the handler's span is not a child of the work span")
			}
		}
	}
	return out
}

// noRawKey fails if any attribute, event or status of any span holds the
// raw key.
func noRawKey(t *testing.T, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		var all []attribute.KeyValue
		all = append(all, s.Attributes()...)
		for _, ev := range s.Events() {
			all = append(all, ev.Attributes...)
		}
		for _, kv := range all {
			if strings.Contains(kv.Value.String(), rawPrefix) {
				t.Errorf("span %s: attribute %s carries the raw key", s.Name(), kv.Key)
			}
		}
		if strings.Contains(s.Status().Description, rawPrefix) || strings.Contains(s.Name(), rawPrefix) {
			t.Errorf("span %s carries the raw key", s.Name())
		}
	}
}

// counts returns the requests counter by outcome and the store histogram
// counts by op.
func (rg *rig) counts(t *testing.T) (requests map[string]int64, store map[string]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rg.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	requests, store = map[string]int64{}, map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelidem.ScopeName {
			t.Errorf("scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if m.Name != otelidem.RequestsMetric {
					t.Errorf("sum %s", m.Name)
				}
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value(otelidem.OutcomeAttr)
					requests[v.AsString()] += p.Value
				}
			case metricdata.Histogram[float64]:
				if m.Name != otelidem.StoreDurationMetric || m.Unit != "s" {
					t.Errorf("histogram %s in %s", m.Name, m.Unit)
				}
				for _, p := range d.DataPoints {
					v, _ := p.Attributes.Value(otelidem.OpAttr)
					store[v.AsString()] += p.Count
				}
			}
		}
	}
	return requests, store
}
