package otelidem_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/otelidem"
	"github.com/idemkit/idem/otelidem/oteltest"
	"github.com/idemkit/idem/redis/redisstore"
	redisenv "github.com/idemkit/idem/redis/redistest"
)

// redisVia returns a redisstore on the shared Redis, reached through a
// fault proxy, under a prefix of this test's own.
func redisVia(t *testing.T) (idem.Store, *testenv.FaultProxy) {
	t.Helper()
	direct, prefix := redisenv.RedisClient(t)
	p := testenv.NewFaultProxy(t, direct.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), DB: direct.Options().DB, ContextTimeoutEnabled: true,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: 1})
	t.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, &redisstore.Config{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// Redis goes away while a request runs and while the next one asks; the
// spans say where it failed, the counter says store_error, and once Redis
// is back the first key still replays. Added latency shows in the store
// histogram.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	store, proxy := redisVia(t)
	rg := oteltest.NewRig(t, func(idem.Store) idem.Store { return store }, httpidem.Config{}, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Idempotency-Key") == oteltest.RawPrefix+"-during" {
			proxy.Set(testenv.Refuse) // the store goes down while the handler runs
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
	proxy.Set(testenv.Pass)
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
	proxy.SetLatency(40 * time.Millisecond)
	if c := status("-slow"); c != http.StatusCreated {
		t.Fatalf("slow store: %d", c)
	}
	proxy.SetLatency(0)
	if d := beginSum(t, rg) - before; d < 0.04 {
		t.Errorf("Begin through 40ms of latency each way recorded %.3fs", d)
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
