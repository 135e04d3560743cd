package otelidem_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/otelidem"
	"github.com/idemkit/idem/otelidem/internal/oteltest"
)

// outageStore is a store that can go away: while down, every call fails
// with errDown, as a store that cannot be reached does; every call first
// waits delay. What it stores survives an outage, as a server's data does.
type outageStore struct {
	idem.Store
	down  atomic.Bool
	delay atomic.Int64 // time.Duration
}

// gate runs call as the store would: after delay, and not at all while
// down.
func gate[T any](s *outageStore, call func() (T, error)) (T, error) {
	time.Sleep(time.Duration(s.delay.Load()))
	if s.down.Load() {
		var zero T
		return zero, errDown
	}
	return call()
}

// gateErr is gate for the calls that return only an error.
func gateErr(s *outageStore, call func() error) error {
	_, err := gate(s, func() (struct{}, error) { return struct{}{}, call() })
	return err
}

func (s *outageStore) Begin(ctx context.Context, r idem.BeginRequest) (idem.Claim, error) {
	return gate(s, func() (idem.Claim, error) { return s.Store.Begin(ctx, r) })
}

func (s *outageStore) Complete(ctx context.Context, o idem.Owner, result []byte) error {
	return gateErr(s, func() error { return s.Store.Complete(ctx, o, result) })
}

func (s *outageStore) Hold(ctx context.Context, o idem.Owner, result []byte) error {
	return gateErr(s, func() error { return s.Store.Hold(ctx, o, result) })
}

func (s *outageStore) Release(ctx context.Context, o idem.Owner) error {
	return gateErr(s, func() error { return s.Store.Release(ctx, o) })
}

func (s *outageStore) Extend(ctx context.Context, o idem.Owner, lease time.Duration) error {
	return gateErr(s, func() error { return s.Store.Extend(ctx, o, lease) })
}

func (s *outageStore) MarkStarted(ctx context.Context, o idem.Owner) error {
	return gateErr(s, func() error { return s.Store.MarkStarted(ctx, o) })
}

func (s *outageStore) Get(ctx context.Context, k idem.Key) (idem.Record, error) {
	return gate(s, func() (idem.Record, error) { return s.Store.Get(ctx, k) })
}

func (s *outageStore) Purge(ctx context.Context, grace time.Duration, batch int) (int64, error) {
	return gate(s, func() (int64, error) { return s.Store.Purge(ctx, grace, batch) })
}

// The store goes away while a request runs and while the next one asks;
// the spans say where it failed, the counter says store_error, and once the
// store is back the first key still replays. Added latency shows in the
// store histogram.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	store := &outageStore{}
	rg := oteltest.NewRig(t, func(s idem.Store) idem.Store { store.Store = s; return store }, httpidem.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == oteltest.RawPrefix+"-during" {
			store.down.Store(true) // the store goes down while the handler runs
		}
		w.WriteHeader(http.StatusCreated)
	})
	status := func(key string) int { return rg.Post(oteltest.RawPrefix+key, "a") }
	if c := status("-before"); c != http.StatusCreated {
		t.Fatalf("before the outage: %d", c)
	}
	if c := status("-during"); c != http.StatusServiceUnavailable {
		t.Fatalf("Complete during the outage: %d", c)
	}
	if c := status("-down"); c != http.StatusServiceUnavailable {
		t.Fatalf("Begin during the outage: %d", c)
	}
	store.down.Store(false)
	if c := status("-before"); c != http.StatusCreated {
		t.Fatalf("replay after the outage: %d", c)
	}

	spans := rg.Spans.Ended()
	oteltest.NoRawKey(t, spans)
	var failed []string
	for _, tr := range oteltest.Trees(t, spans) {
		v, _ := oteltest.Attr(tr.Request, otelidem.OutcomeAttr)
		if v.AsString() != "store_error" {
			continue
		}
		for name, s := range tr.Children {
			if s.Status().Code == codes.Error {
				failed = append(failed, name+" "+opOfError(s))
			}
		}
	}
	if len(failed) != 2 || !contains(failed, otelidem.SpanComplete+" complete") || !contains(failed, otelidem.SpanDecide+" begin") {
		t.Errorf("failed spans %v, want idem.complete (complete) and idem.decide (begin)", failed)
	}
	req, calls := rg.Counts(t)
	if req["executed"] != 1 || req["store_error"] != 2 || req["replayed"] != 1 {
		t.Errorf("requests %v", req)
	}
	if calls["begin"] != 4 || calls["complete"] != 2 {
		t.Errorf("store calls %v", calls)
	}

	before := beginSum(t, rg)
	store.delay.Store(int64(40 * time.Millisecond))
	if c := status("-slow"); c != http.StatusCreated {
		t.Fatalf("slow store: %d", c)
	}
	store.delay.Store(0)
	if d := beginSum(t, rg) - before; d < 0.04 {
		t.Errorf("Begin behind 40ms of latency recorded %.3fs", d)
	}
}

// opOfError returns the idem.op of the span's first error event.
func opOfError(s sdktrace.ReadOnlySpan) string {
	for _, ev := range s.Events() {
		for _, kv := range ev.Attributes {
			if kv.Key == otelidem.OpAttr {
				return kv.Value.AsString()
			}
		}
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// beginSum returns the total seconds recorded for Begin.
func beginSum(t *testing.T, rg *oteltest.Rig) float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := rg.Reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, p := range h.DataPoints {
					if v, _ := p.Attributes.Value(otelidem.OpAttr); v.AsString() == "begin" {
						sum += p.Sum
					}
				}
			}
		}
	}
	return sum
}
