package promidem

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/outbox"
)

// OutboxObserver exports what an outbox relay reports: it is an
// outbox.BacklogObserver for RelayConfig.Observer.
//
// It serves idem_outbox_published_total, idem_outbox_retried_total and
// idem_outbox_parked_total (counters of messages; the parked counter is
// labelled reason with the message's outbox.ReasonClass, a fixed set of
// seven values such as too_large, no_route, missing_exchange and
// rejected), and two gauges for
// alerting on a relay that has stopped publishing:
// idem_outbox_pending_messages (the unpublished backlog: committed, not
// yet confirmed by the broker; parked messages not counted) and
// idem_outbox_oldest_pending_seconds (the age of the oldest pending
// message by the database clock, 0 when none is pending). The gauges are
// refreshed after the relay's passes, at most once a second, and while
// it is idle; an alert on the age catches a relay that is failing, and
// an alert on a backlog that stays up catches one that is gone (their
// values stop moving). The relays of one outbox may share an
// OutboxObserver; give each outbox its own, on a Registerer with a label
// that tells them apart.
type OutboxObserver struct {
	published, retried prometheus.Counter
	parked             *prometheus.CounterVec
	pending, oldest    prometheus.Gauge
}

var _ outbox.BacklogObserver = (*OutboxObserver)(nil)

// NewOutboxObserver registers the outbox families on reg.
func NewOutboxObserver(reg prometheus.Registerer) (*OutboxObserver, error) {
	if reg == nil {
		return nil, configError("reg", "nil Registerer")
	}
	o := &OutboxObserver{
		published: prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_published_total", Help: "Outbox messages confirmed by the broker and marked sent."}),
		retried:   prometheus.NewCounter(prometheus.CounterOpts{Name: "idem_outbox_retried_total", Help: "Outbox publish attempts that failed with a transient error (retried after a backoff)."}),
		parked:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idem_outbox_parked_total", Help: "Outbox messages the broker refused for good, parked for an operator, by reason class."}, []string{"reason"}),
		pending:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_outbox_pending_messages", Help: "Outbox messages committed and not yet confirmed by the broker (parked ones not counted)."}),
		oldest:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "idem_outbox_oldest_pending_seconds", Help: "Age of the oldest pending outbox message, by the database clock (0 when none is pending)."}),
	}
	for _, c := range []prometheus.Collector{o.published, o.retried, o.parked, o.pending, o.oldest} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// Published counts n sent messages.
func (o *OutboxObserver) Published(n int) { o.published.Add(float64(n)) }

// Retried counts a failed attempt.
func (o *OutboxObserver) Retried(outbox.Message, error) { o.retried.Inc() }

// Parked counts a parked message under its reason class.
func (o *OutboxObserver) Parked(_ outbox.Message, reason string) {
	o.parked.WithLabelValues(outbox.ReasonClass(reason)).Inc()
}

// Lag sets the oldest pending message's age.
func (o *OutboxObserver) Lag(age time.Duration) { o.oldest.Set(age.Seconds()) }

// Backlog sets the pending count and the oldest pending message's age.
func (o *OutboxObserver) Backlog(pending int64, oldest time.Duration) {
	o.pending.Set(float64(pending))
	o.oldest.Set(oldest.Seconds())
}
