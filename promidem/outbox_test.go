package promidem_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/promidem"
)

// The outbox observer's counters add up under concurrent passes, and its
// gauges hold the last backlog report; a second observer on one registry
// is refused (one per outbox).
func TestOutboxObserver(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	o, err := promidem.NewOutboxObserver(reg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			o.Published(3)
			o.Retried(outbox.Message{ID: "a"}, errors.New("away"))
			o.Parked(outbox.Message{ID: "b"}, "too large")
			o.Parked(outbox.Message{ID: "c"}, outbox.PermanentAs(outbox.ReasonTooLarge, errors.New("refused")).Error())
			o.Parked(outbox.Message{ID: "d"}, outbox.PermanentAs(outbox.ReasonMissingExchange, errors.New("refused")).Error())
			o.Parked(outbox.Message{ID: "e"}, "permanent (invented): x")
		})
	}
	wg.Wait()
	o.Backlog(1234, 90*time.Second)
	want := map[string]float64{
		"idem_outbox_published_total":        24,
		"idem_outbox_retried_total":          8,
		"idem_outbox_parked_total":           32,
		"idem_outbox_pending_messages":       1234,
		"idem_outbox_oldest_pending_seconds": 90,
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != len(want) {
		t.Fatalf("%d families, want %d", len(mfs), len(want))
	}
	byReason := map[string]float64{}
	for _, mf := range mfs {
		v := 0.0
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" {
					byReason[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
		if v != want[mf.GetName()] {
			t.Errorf("%s = %v, want %v", mf.GetName(), v, want[mf.GetName()])
		}
	}
	// By reason class: a reason without a known class counts as rejected.
	if len(byReason) != 3 || byReason["rejected"] != 16 || byReason["too_large"] != 8 || byReason["missing_exchange"] != 8 {
		t.Errorf("parked by reason %v, want rejected 16, too_large 8, missing_exchange 8", byReason)
	}
	o.Lag(0)
	if v := gaugeValue(t, reg, "idem_outbox_oldest_pending_seconds"); v != 0 {
		t.Fatalf("oldest after Lag(0) = %v", v)
	}
	if _, err := promidem.NewOutboxObserver(reg); err == nil {
		t.Fatal("a second OutboxObserver on one registry was accepted")
	}
	if _, err := promidem.NewOutboxObserver(nil); err == nil {
		t.Fatal("nil Registerer accepted")
	}
}

func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no family %s", name)
	return 0
}
