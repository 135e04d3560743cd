package otelidem

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idem/outbox"
)

// The outbox relay's metric names (OutboxObserver).
const (
	OutboxPublishedMetric     = "idem.outbox.published"
	OutboxRetriedMetric       = "idem.outbox.retried"
	OutboxParkedMetric        = "idem.outbox.parked"
	OutboxPendingMetric       = "idem.outbox.pending"
	OutboxOldestPendingMetric = "idem.outbox.oldest_pending"
)

// OutboxConfig chooses the meter provider of an OutboxObserver. A nil
// *OutboxConfig means otel.GetMeterProvider().
type OutboxConfig struct {
	MeterProvider metric.MeterProvider
}

// OutboxObserver measures an outbox relay: it is an
// outbox.BacklogObserver for RelayConfig.Observer. It records the counters
// idem.outbox.published, idem.outbox.retried and idem.outbox.parked
// ({message}; parked has the attribute reason, the message's
// outbox.ReasonClass: a fixed set of seven values such as too_large,
// no_route, missing_exchange and rejected) and the gauges idem.outbox.pending (the unpublished
// backlog: committed, not yet confirmed by the broker, parked messages not
// counted) and idem.outbox.oldest_pending (the oldest pending message's
// age in seconds, by the database clock; 0 when none is pending),
// refreshed after the relay's passes at most once a second and while it
// is idle. Alert on the age to catch a relay that has stopped publishing.
type OutboxObserver struct {
	published, retried, parked metric.Int64Counter
	pending                    metric.Int64Gauge
	oldest                     metric.Float64Gauge
}

var _ outbox.BacklogObserver = (*OutboxObserver)(nil)

// NewOutboxObserver returns the observer. It fails only when the meter
// refuses an instrument.
func NewOutboxObserver(cfg *OutboxConfig) (*OutboxObserver, error) {
	var c OutboxConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	m := c.MeterProvider.Meter(ScopeName)
	var o OutboxObserver
	var err error
	if o.published, err = m.Int64Counter(OutboxPublishedMetric, metric.WithUnit("{message}"), metric.WithDescription("Outbox messages confirmed by the broker and marked sent.")); err != nil {
		return nil, err
	}
	if o.retried, err = m.Int64Counter(OutboxRetriedMetric, metric.WithUnit("{message}"), metric.WithDescription("Outbox publish attempts that failed with a transient error.")); err != nil {
		return nil, err
	}
	if o.parked, err = m.Int64Counter(OutboxParkedMetric, metric.WithUnit("{message}"), metric.WithDescription("Outbox messages the broker refused for good, parked for an operator.")); err != nil {
		return nil, err
	}
	if o.pending, err = m.Int64Gauge(OutboxPendingMetric, metric.WithUnit("{message}"), metric.WithDescription("Outbox messages committed and not yet confirmed by the broker.")); err != nil {
		return nil, err
	}
	if o.oldest, err = m.Float64Gauge(OutboxOldestPendingMetric, metric.WithUnit("s"), metric.WithDescription("Age of the oldest pending outbox message, by the database clock.")); err != nil {
		return nil, err
	}
	return &o, nil
}

// Published counts n sent messages.
func (o *OutboxObserver) Published(n int) { o.published.Add(context.Background(), int64(n)) }

// Retried counts a failed attempt.
func (o *OutboxObserver) Retried(outbox.Message, error) { o.retried.Add(context.Background(), 1) }

// Parked counts a parked message under its reason class.
func (o *OutboxObserver) Parked(_ outbox.Message, reason string) {
	o.parked.Add(context.Background(), 1, metric.WithAttributes(attribute.String("reason", outbox.ReasonClass(reason))))
}

// Lag records the oldest pending message's age.
func (o *OutboxObserver) Lag(age time.Duration) { o.oldest.Record(context.Background(), age.Seconds()) }

// Backlog records the pending count and the oldest pending message's age.
func (o *OutboxObserver) Backlog(pending int64, oldest time.Duration) {
	o.pending.Record(context.Background(), pending)
	o.oldest.Record(context.Background(), oldest.Seconds())
}
