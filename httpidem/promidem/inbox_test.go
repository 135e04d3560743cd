package promidem_test

import (
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/httpidem/promidem"
	"github.com/idemkit/idem/inbox"
)

// The inbox adapters' series keep the names and labels they had when the
// adapters registered them: idem_inbox_messages_total{adapter, consumer,
// outcome}, every outcome of a subscriber at zero from its first delivery,
// and subscribers of one consumer sharing a series.
func TestInboxObserverSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	a, err := promidem.NewInboxObserver(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := promidem.NewInboxObserver(reg) // a second subscriber's, on the same registry
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			a.ObserveDelivery(inbox.Delivery{Adapter: "nats", Consumer: "billing", Outcome: inbox.DeliveryProcessed})
			b.ObserveDelivery(inbox.Delivery{Adapter: "nats", Consumer: "billing", Outcome: inbox.DeliveryProcessed})
		})
	}
	wg.Wait()
	a.ObserveDelivery(inbox.Delivery{Adapter: "amqp", Consumer: "ledger", Outcome: inbox.DeliveryDeadLettered})
	a.ObserveDelivery(inbox.Delivery{Adapter: "amqp", Consumer: "ledger", Outcome: 0}) // unknown: ignored

	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			k := mf.GetName()
			for _, l := range m.GetLabel() {
				k += " " + l.GetName() + "=" + l.GetValue()
			}
			got[k] = m.GetCounter().GetValue()
		}
	}
	want := map[string]float64{}
	for _, s := range []string{"adapter=amqp consumer=ledger", "adapter=nats consumer=billing"} {
		for _, o := range []string{"processed", "duplicate", "retried", "dead_lettered"} {
			want["idem_inbox_messages_total "+s+" outcome="+o] = 0
		}
	}
	want["idem_inbox_messages_total adapter=nats consumer=billing outcome=processed"] = 16
	want["idem_inbox_messages_total adapter=amqp consumer=ledger outcome=dead_lettered"] = 1
	if len(got) != len(want) {
		t.Fatalf("series %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if _, err := promidem.NewInboxObserver(nil); err == nil {
		t.Fatal("NewInboxObserver(nil) succeeded")
	}
}
