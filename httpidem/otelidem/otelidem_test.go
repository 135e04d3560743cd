package otelidem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/otelidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/observe"
)

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

func TestSpanTree(t *testing.T) {
	t.Parallel()
	rg := newRig(t, nil, httpidem.Config{}, nil)
	raw := rawPrefix + "-one"
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", scope)
	sc, err := httpidem.HeaderScope("Authorization")(r)
	if err != nil {
		t.Fatal(err)
	}
	hashed := idem.MustKey(sc, raw).String()
	if c := rg.post(raw, "a"); c != http.StatusCreated {
		t.Fatalf("first: %d", c)
	}
	spans := rg.spans.Ended()
	noRawKey(t, spans)
	trs := trees(t, spans)
	if len(trs) != 1 {
		t.Fatalf("%d traces", len(trs))
	}
	for _, tr := range trs {
		for _, name := range []string{otelidem.SpanDecide, otelidem.SpanWork, otelidem.SpanComplete} {
			s := tr.children[name]
			if s == nil {
				t.Fatalf("no %s span", name)
			}
			if v, _ := attr(s, otelidem.KeyAttr); v.AsString() != hashed {
				t.Errorf("%s: idem.key %q, want the hashed key %q", name, v.String(), hashed)
			}
			if s.SpanKind() != trace.SpanKindInternal || s.Status().Code == codes.Error {
				t.Errorf("%s: kind %v, status %v", name, s.SpanKind(), s.Status())
			}
		}
		if tr.handler == nil {
			t.Fatal("no handler span")
		}
		if v, _ := attr(tr.children[otelidem.SpanDecide], otelidem.DecisionAttr); v.AsString() != "acquired" {
			t.Errorf("decide: idem.decision %q", v.String())
		}
		if v, _ := attr(tr.children[otelidem.SpanWork], otelidem.StatusAttr); v.AsInt64() != 201 {
			t.Errorf("work: status %v", v.String())
		}
		for _, s := range []sdktrace.ReadOnlySpan{tr.request, tr.children[otelidem.SpanComplete]} {
			if v, _ := attr(s, otelidem.OutcomeAttr); v.AsString() != "executed" {
				t.Errorf("%s: idem.outcome %q", s.Name(), v.String())
			}
		}
		if v, _ := attr(tr.request, otelidem.KeyAttr); v.AsString() != hashed {
			t.Errorf("request: idem.key %q", v.String())
		}
	}
	// The retry: a decide span only, outcome replayed on the request span.
	rg.spans.Reset()
	if c := rg.post(raw, "a"); c != http.StatusCreated {
		t.Fatalf("retry: %d", c)
	}
	spans = rg.spans.Ended()
	noRawKey(t, spans)
	for _, tr := range trees(t, spans) {
		if len(tr.children) != 1 || tr.children[otelidem.SpanDecide] == nil || tr.handler != nil {
			t.Errorf("retry spans: %v", tr.children)
		}
		if v, _ := attr(tr.children[otelidem.SpanDecide], otelidem.DecisionAttr); v.AsString() != "replayed" {
			t.Errorf("decide: %q", v.String())
		}
		if v, _ := attr(tr.request, otelidem.OutcomeAttr); v.AsString() != "replayed" {
			t.Errorf("request: %q", v.String())
		}
		if v, _ := attr(tr.request, otelidem.ReplayedAttr); !v.AsBool() {
			t.Error("request: idem.replayed not true")
		}
	}
	req, store := rg.counts(t)
	if req["executed"] != 1 || req["replayed"] != 1 || len(req) != 2 {
		t.Errorf("requests %v", req)
	}
	if store["begin"] != 2 || store["complete"] != 1 || len(store) != 2 {
		t.Errorf("store calls %v", store)
	}
}

var errDown = idem.Unavailable("test", errors.New("connection refused"))

type failingStore struct {
	idem.Store
	begin, complete error
}

func (s *failingStore) Begin(ctx context.Context, r idem.BeginRequest) (idem.Claim, error) {
	if s.begin != nil {
		return idem.Claim{}, s.begin
	}
	return s.Store.Begin(ctx, r)
}

func (s *failingStore) Complete(ctx context.Context, o idem.Owner, b []byte) error {
	if s.complete != nil {
		return s.complete
	}
	return s.Store.Complete(ctx, o, b)
}

// Failures mark the phase's span as an error, with the outcome.
func TestErrorSpans(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, span, outcome string
		store               *failingStore
		handler             http.HandlerFunc
	}{
		{"begin fails", otelidem.SpanDecide, "store_error", &failingStore{begin: errDown}, nil},
		{"complete fails", otelidem.SpanComplete, "store_error", &failingStore{complete: errDown}, nil},
		{"handler panics", otelidem.SpanWork, "released", &failingStore{}, func(http.ResponseWriter, *http.Request) { panic("boom") }},
		{"outcome unknown", otelidem.SpanWork, "outcome_unknown", &failingStore{}, func(w http.ResponseWriter, r *http.Request) {
			httpidem.OutcomeUnknown(w, errors.New("upstream reset"))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			rg := newRig(t, func(s idem.Store) idem.Store { c.store.Store = s; return c.store }, httpidem.Config{}, c.handler)
			func() {
				defer func() { _ = recover() }()
				rg.post(rawPrefix+"-err", "a")
			}()
			spans := rg.spans.Ended()
			noRawKey(t, spans)
			for _, tr := range trees(t, spans) {
				s := tr.children[c.span]
				if s == nil || s.Status().Code != codes.Error || len(s.Events()) == 0 {
					t.Fatalf("%s span not an error: %v", c.span, s)
				}
				if v, _ := attr(tr.request, otelidem.OutcomeAttr); v.AsString() != c.outcome {
					t.Errorf("outcome %q, want %s", v.String(), c.outcome)
				}
			}
			if req, _ := rg.counts(t); req[c.outcome] != 1 {
				t.Errorf("requests %v", req)
			}
		})
	}
}

// A storm of duplicates: every request's trace is well formed, exactly one
// per key executed (with decide, work and complete spans), the others
// replayed or in flight (a decide span only), and the counter agrees with
// the spans.
func TestStormTraces(t *testing.T) {
	t.Parallel()
	const keys, dups = 5, 10
	rg := newRig(t, nil, httpidem.Config{}, nil)
	var start, wg sync.WaitGroup
	start.Add(1)
	codes := make([]int, keys*dups)
	for i := range codes {
		wg.Go(func() {
			start.Wait()
			codes[i] = rg.post(rawPrefix+"-storm-"+strconv.Itoa(i%keys), `{"n":1}`)
		})
	}
	start.Done()
	wg.Wait()
	spans := rg.spans.Ended()
	noRawKey(t, spans)
	trs := trees(t, spans)
	if len(trs) != len(codes) {
		t.Fatalf("%d traces for %d requests", len(trs), len(codes))
	}
	byOutcome := map[string]int64{}
	executed := map[string]int{}
	for _, tr := range trs {
		v, _ := attr(tr.request, otelidem.OutcomeAttr)
		o := v.AsString()
		byOutcome[o]++
		key, _ := attr(tr.request, otelidem.KeyAttr)
		switch o {
		case "executed":
			executed[key.AsString()]++
			if len(tr.children) != 3 || tr.handler == nil {
				t.Errorf("executed request with spans %v", tr.children)
			}
		case "replayed", "in_flight":
			if len(tr.children) != 1 || tr.children[otelidem.SpanDecide] == nil {
				t.Errorf("%s request with spans %v", o, tr.children)
			}
		default:
			t.Errorf("outcome %q", o)
		}
	}
	if len(executed) != keys {
		t.Errorf("%d keys executed, want %d", len(executed), keys)
	}
	for k, n := range executed {
		if n != 1 {
			t.Errorf("key %s executed %d times", k, n)
		}
	}
	req, store := rg.counts(t)
	if fmt.Sprint(req) != fmt.Sprint(byOutcome) {
		t.Errorf("counter %v, spans %v", req, byOutcome)
	}
	if store["begin"] != uint64(len(codes)) || store["complete"] != keys {
		t.Errorf("store calls %v", store)
	}
}

// New falls back to the global providers.
func TestDefaults(t *testing.T) {
	t.Parallel()
	o, err := otelidem.New(nil)
	if err != nil || o == nil {
		t.Fatal(err)
	}
	ctx, end := o.StartPhase(context.Background(), observe.PhaseDecide, "abc")
	if ctx == nil || end == nil {
		t.Fatal("no phase")
	}
	end(observe.PhaseEnd{Decision: observe.DecisionAcquired})
	o.StoreCall(ctx, observe.StoreCall{Op: observe.OpBegin, Duration: time.Millisecond})
	o.Decided(ctx, observe.Event{Decision: observe.DecisionExecuted})
}
