package promidem

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem/httpidem"
)

// Metrics is an httpidem.Observer that keeps the middleware's Prometheus
// metrics. It is also a prometheus.Collector of them. Build it with New.
type Metrics struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	// Children resolved once, indexed by decision and op, so that a
	// request does no label lookup.
	byDecision []prometheus.Counter
	byOp       []prometheus.Observer
}

// buckets are the bounds, in seconds, of
// idem_http_store_duration_seconds: 100µs to 2.5s (otelidem uses the same).
var buckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// New returns the metrics, registered on reg unless reg is nil (register
// the Metrics yourself then, or not at all). Every outcome and op series
// exists from the start, at zero.
//
// A registry takes one set: New fails with a hint when reg already has
// them. Give each middleware its own Registerer, for instance
// prometheus.WrapRegistererWith(prometheus.Labels{"api": "payments"}, reg).
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_http_requests_total",
			Help: "Requests to protected methods, by the middleware's decision.",
		}, []string{"outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_http_store_duration_seconds",
			Help:    "Latency of idempotency store calls made by the HTTP middleware.",
			Buckets: buckets,
		}, []string{"op"}),
	}
	for _, d := range httpidem.FinalDecisions() {
		for int(d) >= len(m.byDecision) {
			m.byDecision = append(m.byDecision, nil)
		}
		m.byDecision[d] = m.requests.WithLabelValues(d.String())
	}
	for _, op := range httpidem.StoreOps() {
		for int(op) >= len(m.byOp) {
			m.byOp = append(m.byOp, nil)
		}
		m.byOp[op] = m.latency.WithLabelValues(op.String())
	}
	if reg == nil {
		return m, nil
	}
	for i, c := range []prometheus.Collector{m.requests, m.latency} {
		if err := reg.Register(c); err != nil {
			if i > 0 {
				reg.Unregister(m.requests)
			}
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("promidem: metrics already registered; give each middleware its own Registerer (e.g. prometheus.WrapRegistererWith with a distinct label value on each)")
			}
			return nil, err
		}
	}
	return m, nil
}

// StoreCall observes the call's latency.
func (m *Metrics) StoreCall(_ context.Context, c httpidem.StoreCall) {
	if int(c.Op) < len(m.byOp) && m.byOp[c.Op] != nil {
		m.byOp[c.Op].Observe(c.Duration.Seconds())
	}
}

// Decided counts a final decision (DecisionAcquired is not counted: the
// request gets its final decision later).
func (m *Metrics) Decided(_ context.Context, e httpidem.Event) {
	if int(e.Decision) < len(m.byDecision) && m.byDecision[e.Decision] != nil {
		m.byDecision[e.Decision].Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.latency.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.latency.Collect(ch)
}

var (
	_ httpidem.Observer    = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)
