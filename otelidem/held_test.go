package otelidem_test

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/otelidem"
)

func TestHeld(t *testing.T) {
	s := memstore.New(&memstore.Config{SweepInterval: -1})
	defer s.Close()
	ctx := context.Background()
	for i, result := range [][]byte{idem.OutcomeUnknownResult(), []byte(`"ok"`)} {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("t", string(rune('a'+i)))})
		if err != nil {
			t.Fatal(err)
		}
		finish := s.Complete
		if string(result) == string(idem.OutcomeUnknownResult()) {
			finish = s.Hold // the key is held: its outcome is unknown
		}
		if err := finish(ctx, c.Owner, result); err != nil {
			t.Fatal(err)
		}
	}
	reader := sdkmetric.NewManualReader()
	h, err := otelidem.NewHeld(s, &otelidem.HeldConfig{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Interval: 1})
	if err != nil {
		t.Fatal(err)
	}
	h.Resolved("service", "result")
	h.Resolved("service", "result")
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				for _, p := range d.DataPoints {
					got[m.Name] = p.Value
				}
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					by, _ := p.Attributes.Value(otelidem.ByAttr)
					how, _ := p.Attributes.Value(otelidem.HowAttr)
					got[m.Name+","+by.AsString()+","+how.AsString()] = p.Value
				}
			}
		}
	}
	if got[otelidem.HeldKeysMetric] != 1 || got[otelidem.ResolutionsMetric+",service,result"] != 2 || len(got) != 2 {
		t.Fatalf("metrics %v", got)
	}
}
