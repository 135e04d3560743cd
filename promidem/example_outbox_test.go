package promidem_test

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/promidem"
)

// The outbox relay's metrics: pass the observer as RelayConfig.Observer
// (ob.NewRelay(pub, &outbox.RelayConfig{Observer: obs})); the relay
// reports the backlog after its passes. Here the report is made by hand.
func ExampleNewOutboxObserver() {
	reg := prometheus.NewRegistry()
	obs, err := promidem.NewOutboxObserver(reg)
	if err != nil {
		panic(err)
	}
	obs.Backlog(42, 90*time.Second) // what a stalled relay reports
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if g := mf.GetMetric()[0].GetGauge(); g != nil {
			fmt.Println(mf.GetName(), g.GetValue())
		}
	}
	// Output:
	// idem_outbox_oldest_pending_seconds 90
	// idem_outbox_pending_messages 42
}
