package otelidem_test

import (
	"context"
	"fmt"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem/otelidem"
)

// The outbox relay's metrics: pass the observer as RelayConfig.Observer
// (ob.NewRelay(pub, &outbox.RelayConfig{Observer: obs})); the relay
// reports the backlog after its passes. Here the report is made by hand.
func ExampleNewOutboxObserver() {
	reader := sdkmetric.NewManualReader()
	obs, err := otelidem.NewOutboxObserver(&otelidem.OutboxConfig{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		panic(err)
	}
	obs.Backlog(42, 90*time.Second) // what a stalled relay reports
	var rm metricdata.ResourceMetrics
	_ = reader.Collect(context.Background(), &rm)
	for _, m := range rm.ScopeMetrics[0].Metrics {
		switch d := m.Data.(type) {
		case metricdata.Gauge[int64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		case metricdata.Gauge[float64]:
			fmt.Println(m.Name, d.DataPoints[0].Value)
		}
	}
	// Output:
	// idem.outbox.pending 42
	// idem.outbox.oldest_pending 90
}
