package adapter

import (
	"sync/atomic"

	"github.com/idemkit/idem/inbox"
)

// Metrics counts what one subscriber did, in process (Stats), and reports
// each outcome to the subscriber's inbox.Observer, if it has one.
type Metrics struct {
	n   [inbox.DeliveryDeadLettered + 1]atomic.Uint64
	obs inbox.Observer
	ev  inbox.Delivery
}

// NewMetrics returns the counters of one subscriber of adapter ("nats",
// "amqp", "kafka") for inbox consumer, reporting to obs (nil: nobody).
func NewMetrics(obs inbox.Observer, adapter, consumer string) *Metrics {
	return &Metrics{obs: obs, ev: inbox.Delivery{Adapter: adapter, Consumer: consumer}}
}

// Inc counts one outcome.
func (m *Metrics) Inc(outcome inbox.DeliveryOutcome) {
	m.n[outcome].Add(1)
	if m.obs != nil {
		ev := m.ev
		ev.Outcome = outcome
		m.obs.ObserveDelivery(ev)
	}
}

// Load returns the count of one outcome.
func (m *Metrics) Load(outcome inbox.DeliveryOutcome) uint64 { return m.n[outcome].Load() }

// Stats returns the counts, with parked, the messages parked now.
func (m *Metrics) Stats(parked int) inbox.DeliveryStats {
	return inbox.DeliveryStats{
		Processed:    m.Load(inbox.DeliveryProcessed),
		Duplicates:   m.Load(inbox.DeliveryDuplicate),
		Retried:      m.Load(inbox.DeliveryRetried),
		DeadLettered: m.Load(inbox.DeliveryDeadLettered),
		Parked:       parked,
	}
}
