package adapter

import (
	"errors"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Outcome labels of idem_inbox_messages_total.
const (
	OutProcessed    = iota // handler ran, committed, acked
	OutDuplicate           // processed before: acked without running the handler
	OutRetried             // an attempt failed and the message will be tried again
	OutDeadLettered        // poison: moved to the dead-letter destination
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"processed", "duplicate", "retried", "dead_lettered"}

// Metrics counts what one subscriber did, in process (Stats) and, when a
// Registerer is given, as the Prometheus counter
// idem_inbox_messages_total{adapter, consumer, outcome}.
type Metrics struct {
	n    [numOutcomes]atomic.Uint64
	prom [numOutcomes]prometheus.Counter
}

// NewMetrics returns the counters of one subscriber of adapter ("nats",
// "amqp", "kafka") for inbox consumer. With reg nil nothing is registered.
// Subscribers of the same adapter and consumer registered on one
// Registerer share one series (the counter already registered is reused).
func NewMetrics(reg prometheus.Registerer, adapter, consumer string) (*Metrics, error) {
	m := &Metrics{}
	if reg == nil {
		return m, nil
	}
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name:        "idem_inbox_messages_total",
		Help:        "Deliveries handled by an inbox broker adapter, by outcome.",
		ConstLabels: prometheus.Labels{"adapter": adapter, "consumer": consumer},
	}, []string{"outcome"})
	if err := reg.Register(vec); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		existing, ok := are.ExistingCollector.(*prometheus.CounterVec)
		if !ok {
			return nil, err
		}
		vec = existing
	}
	for i := range m.prom {
		m.prom[i] = vec.WithLabelValues(outcomeNames[i])
	}
	return m, nil
}

// Inc counts one outcome (OutProcessed …).
func (m *Metrics) Inc(outcome int) {
	m.n[outcome].Add(1)
	if m.prom[outcome] != nil {
		m.prom[outcome].Inc()
	}
}

// Load returns the count of one outcome.
func (m *Metrics) Load(outcome int) uint64 { return m.n[outcome].Load() }
