package otelidem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/observe"
	"github.com/idemkit/idem/otelidem"
	"github.com/idemkit/idem/otelidem/internal/oteltest"
)

func TestSpanTree(t *testing.T) {
	t.Parallel()
	rg := oteltest.NewRig(t, nil, httpidem.Config{}, nil)
	raw := oteltest.RawPrefix + "-one"
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("Authorization", oteltest.Scope)
	sc, err := httpidem.HeaderScope("Authorization")(r)
	if err != nil {
		t.Fatal(err)
	}
	hashed := idem.MustKey(sc, raw).String()
	if c := rg.Post(raw, "a"); c != http.StatusCreated {
		t.Fatalf("first: %d", c)
	}
	spans := rg.Spans.Ended()
	oteltest.NoRawKey(t, spans)
	trs := oteltest.Trees(t, spans)
	if len(trs) != 1 {
		t.Fatalf("%d traces", len(trs))
	}
	for _, tr := range trs {
		for _, name := range []string{otelidem.SpanDecide, otelidem.SpanWork, otelidem.SpanComplete} {
			s := tr.Children[name]
			if s == nil {
				t.Fatalf("no %s span", name)
			}
			if v, _ := oteltest.Attr(s, otelidem.KeyAttr); v.AsString() != hashed {
				t.Errorf("%s: idem.key %q, want the hashed key %q", name, v.String(), hashed)
			}
			if s.SpanKind() != trace.SpanKindInternal || s.Status().Code == codes.Error {
				t.Errorf("%s: kind %v, status %v", name, s.SpanKind(), s.Status())
			}
		}
		if tr.Handler == nil {
			t.Fatal("no handler span")
		}
		if v, _ := oteltest.Attr(tr.Children[otelidem.SpanDecide], otelidem.DecisionAttr); v.AsString() != "acquired" {
			t.Errorf("decide: idem.decision %q", v.String())
		}
		if v, _ := oteltest.Attr(tr.Children[otelidem.SpanWork], otelidem.StatusAttr); v.AsInt64() != 201 {
			t.Errorf("work: status %v", v.String())
		}
		for _, s := range []sdktrace.ReadOnlySpan{tr.Request, tr.Children[otelidem.SpanComplete]} {
			if v, _ := oteltest.Attr(s, otelidem.OutcomeAttr); v.AsString() != "executed" {
				t.Errorf("%s: idem.outcome %q", s.Name(), v.String())
			}
		}
		if v, _ := oteltest.Attr(tr.Request, otelidem.KeyAttr); v.AsString() != hashed {
			t.Errorf("request: idem.key %q", v.String())
		}
	}
	// The retry: a decide span only, outcome replayed on the request span.
	rg.Spans.Reset()
	if c := rg.Post(raw, "a"); c != http.StatusCreated {
		t.Fatalf("retry: %d", c)
	}
	spans = rg.Spans.Ended()
	oteltest.NoRawKey(t, spans)
	for _, tr := range oteltest.Trees(t, spans) {
		if len(tr.Children) != 1 || tr.Children[otelidem.SpanDecide] == nil || tr.Handler != nil {
			t.Errorf("retry spans: %v", tr.Children)
		}
		if v, _ := oteltest.Attr(tr.Children[otelidem.SpanDecide], otelidem.DecisionAttr); v.AsString() != "replayed" {
			t.Errorf("decide: %q", v.String())
		}
		if v, _ := oteltest.Attr(tr.Request, otelidem.OutcomeAttr); v.AsString() != "replayed" {
			t.Errorf("request: %q", v.String())
		}
		if v, _ := oteltest.Attr(tr.Request, otelidem.ReplayedAttr); !v.AsBool() {
			t.Error("request: idem.replayed not true")
		}
	}
	req, store := rg.Counts(t)
	if req["executed"] != 1 || req["replayed"] != 1 || len(req) != 2 {
		t.Errorf("requests %v", req)
	}
	if store["begin"] != 2 || store["complete"] != 1 || len(store) != 2 {
		t.Errorf("store calls %v", store)
	}
}

var errDown = idem.StoreError(context.Background(), "test", errors.New("connection refused"))

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
			rg := oteltest.NewRig(t, func(s idem.Store) idem.Store { c.store.Store = s; return c.store }, httpidem.Config{}, c.handler)
			func() {
				defer func() { _ = recover() }()
				rg.Post(oteltest.RawPrefix+"-err", "a")
			}()
			spans := rg.Spans.Ended()
			oteltest.NoRawKey(t, spans)
			for _, tr := range oteltest.Trees(t, spans) {
				s := tr.Children[c.span]
				if s == nil || s.Status().Code != codes.Error || len(s.Events()) == 0 {
					t.Fatalf("%s span not an error: %v", c.span, s)
				}
				if v, _ := oteltest.Attr(tr.Request, otelidem.OutcomeAttr); v.AsString() != c.outcome {
					t.Errorf("outcome %q, want %s", v.String(), c.outcome)
				}
			}
			if req, _ := rg.Counts(t); req[c.outcome] != 1 {
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
	rg := oteltest.NewRig(t, nil, httpidem.Config{}, nil)
	var start, wg sync.WaitGroup
	start.Add(1)
	codes := make([]int, keys*dups)
	for i := range codes {
		wg.Go(func() {
			start.Wait()
			codes[i] = rg.Post(oteltest.RawPrefix+"-storm-"+strconv.Itoa(i%keys), `{"n":1}`)
		})
	}
	start.Done()
	wg.Wait()
	spans := rg.Spans.Ended()
	oteltest.NoRawKey(t, spans)
	trs := oteltest.Trees(t, spans)
	if len(trs) != len(codes) {
		t.Fatalf("%d traces for %d requests", len(trs), len(codes))
	}
	byOutcome := map[string]int64{}
	executed := map[string]int{}
	for _, tr := range trs {
		v, _ := oteltest.Attr(tr.Request, otelidem.OutcomeAttr)
		o := v.AsString()
		byOutcome[o]++
		key, _ := oteltest.Attr(tr.Request, otelidem.KeyAttr)
		switch o {
		case "executed":
			executed[key.AsString()]++
			if len(tr.Children) != 3 || tr.Handler == nil {
				t.Errorf("executed request with spans %v", tr.Children)
			}
		case "replayed", "in_flight":
			if len(tr.Children) != 1 || tr.Children[otelidem.SpanDecide] == nil {
				t.Errorf("%s request with spans %v", o, tr.Children)
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
	req, store := rg.Counts(t)
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
	ctx, end := o.StartPhase(context.Background(), idem.PhaseDecide, "abc")
	if ctx == nil || end == nil {
		t.Fatal("no phase")
	}
	end(observe.PhaseEnd{Decision: observe.DecisionAcquired})
	o.StoreCall(ctx, observe.StoreCall{Op: idem.MethodBegin, Duration: time.Millisecond})
	o.Decided(ctx, observe.Event{Decision: observe.DecisionExecuted})
}
