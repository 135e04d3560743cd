package oteltest

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

// Scope is the Authorization header every request of the rig carries.
const Scope = "Bearer otel-test"

// RawPrefix starts every raw key of these tests: no attribute may hold it.
const RawPrefix = "raw-otel-key-91d3"

// Rig is the middleware under test, with what it reported.
type Rig struct {
	Spans  *tracetest.SpanRecorder // the spans started and ended
	Reader *sdkmetric.ManualReader // the metrics
	tracer trace.Tracer
	h      http.Handler
}

// NewRig is the middleware over memstore, observed by otelidem, inside a
// "request" span as server instrumentation would start; the handler
// starts a "handler" span of its own.
func NewRig(t testing.TB, wrap func(idem.Store) idem.Store, cfg httpidem.Config, handler http.HandlerFunc) *Rig {
	t.Helper()
	rg := &Rig{Spans: tracetest.NewSpanRecorder(), Reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rg.Spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(rg.Reader))
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

// Post sends a POST with key (none if empty) and body through the rig and
// returns the status code.
func (rg *Rig) Post(key, body string) int {
	r := httptest.NewRequest(http.MethodPost, "/pay", strings.NewReader(body))
	r.Header.Set("Authorization", Scope)
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	w := httptest.NewRecorder()
	rg.h.ServeHTTP(w, r)
	return w.Code
}

// Attr returns the value of the span's attribute k, and whether it has one.
func Attr(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if kv.Key == k {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

// Tree is one request's trace: the request span and its descendants by
// name.
type Tree struct {
	Request  sdktrace.ReadOnlySpan
	Children map[string]sdktrace.ReadOnlySpan // by name, children of Request
	Handler  sdktrace.ReadOnlySpan            // the handler's own span, if it ran
}

// Trees groups the ended spans by trace, and fails t where a trace is not
// well formed: a span of otelidem's that is not a child of the request
// span, two of one name in a request, no request span, or a handler span
// that is not a child of the work span.
func Trees(t testing.TB, spans []sdktrace.ReadOnlySpan) map[trace.TraceID]*Tree {
	t.Helper()
	out := map[trace.TraceID]*Tree{}
	get := func(id trace.TraceID) *Tree {
		if out[id] == nil {
			out[id] = &Tree{Children: map[string]sdktrace.ReadOnlySpan{}}
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
			tr.Request = s
		case "handler":
			tr.Handler = s
		default:
			parent, ok := byID[s.Parent().SpanID()]
			if !ok || parent.Name() != "request" {
				t.Errorf("%s is not a child of the request span", s.Name())
			}
			if tr.Children[s.Name()] != nil {
				t.Errorf("two %s spans in one request", s.Name())
			}
			tr.Children[s.Name()] = s
		}
	}
	for _, tr := range out {
		if tr.Request == nil {
			t.Fatal("a trace without its request span")
		}
		if tr.Handler != nil {
			w := tr.Children[otelidem.SpanWork]
			if w == nil || tr.Handler.Parent().SpanID() != w.SpanContext().SpanID() {
				t.Error("the handler's span is not a child of the work span")
			}
		}
	}
	return out
}

// NoRawKey fails if any attribute, event or status of any span holds the
// raw key.
func NoRawKey(t testing.TB, spans []sdktrace.ReadOnlySpan) {
	t.Helper()
	for _, s := range spans {
		var all []attribute.KeyValue
		all = append(all, s.Attributes()...)
		for _, ev := range s.Events() {
			all = append(all, ev.Attributes...)
		}
		for _, kv := range all {
			if strings.Contains(kv.Value.String(), RawPrefix) {
				t.Errorf("span %s: attribute %s carries the raw key", s.Name(), kv.Key)
			}
		}
		if strings.Contains(s.Status().Description, RawPrefix) || strings.Contains(s.Name(), RawPrefix) {
			t.Errorf("span %s carries the raw key", s.Name())
		}
	}
}

// Counts returns the requests counter by outcome and the store histogram
// counts by op.
func (rg *Rig) Counts(t testing.TB) (requests map[string]int64, store map[string]uint64) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rg.Reader.Collect(context.Background(), &rm); err != nil {
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
