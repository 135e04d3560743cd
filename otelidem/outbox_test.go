package otelidem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem/otelidem"
	"github.com/idemkit/idem/outbox"
)

// The outbox observer's counters add up under concurrent passes and its
// gauges hold the last backlog report.
func TestOutboxObserver(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	o, err := otelidem.NewOutboxObserver(&otelidem.OutboxConfig{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			o.Published(3)
			o.Retried(outbox.Message{ID: "a"}, errors.New("away"))
			o.Parked(outbox.Message{ID: "b"}, "too large")
		})
	}
	wg.Wait()
	o.Backlog(1234, 90*time.Second)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				got[m.Name] = float64(d.DataPoints[0].Value)
			case metricdata.Gauge[int64]:
				got[m.Name] = float64(d.DataPoints[0].Value)
			case metricdata.Gauge[float64]:
				got[m.Name] = d.DataPoints[0].Value
			}
		}
	}
	want := map[string]float64{
		otelidem.OutboxPublishedMetric:     24,
		otelidem.OutboxRetriedMetric:       8,
		otelidem.OutboxParkedMetric:        8,
		otelidem.OutboxPendingMetric:       1234,
		otelidem.OutboxOldestPendingMetric: 90,
	}
	if len(got) != len(want) {
		t.Fatalf("metrics %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}
