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
			o.Parked(outbox.Message{ID: "c"}, parkReason(outbox.ReasonTooLarge))
			o.Parked(outbox.Message{ID: "d"}, parkReason(outbox.ReasonNoRoute))
			o.Parked(outbox.Message{ID: "e"}, "permanent (invented): x")
		})
	}
	wg.Wait()
	o.Backlog(1234, 90*time.Second)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	byReason := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					got[m.Name] += float64(dp.Value)
					if r, ok := dp.Attributes.Value("reason"); ok {
						byReason[r.AsString()] += dp.Value
					}
				}
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
		otelidem.OutboxParkedMetric:        32,
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
	// By reason class: a reason without a known class counts as rejected.
	if len(byReason) != 3 || byReason["rejected"] != 16 || byReason["too_large"] != 8 || byReason["no_route"] != 8 {
		t.Errorf("parked by reason %v, want rejected 16, too_large 8, no_route 8", byReason)
	}
}

// parkReason is the reason the relay stores for a refusal of class.
func parkReason(class string) string {
	return outbox.PermanentAs(class, errors.New("refused")).Error()
}
