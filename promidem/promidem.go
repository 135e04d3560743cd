package promidem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// Metrics is an observe.Observer that keeps idem's Prometheus metrics for
// every adapter: the HTTP middleware, the gRPC and Connect interceptors
// It is also a prometheus.Collector of them. Build it with
// New.
type Metrics struct {
	families []family // HTTP, RPC
	// The children of each protocol, resolved once, indexed by decision
	// and op, so that a request does no label lookup.
	series [3]atomic.Pointer[series] // by Protocol-1
	mu     sync.Mutex                // creates series
}

// family is a requests counter and a store latency histogram.
type family struct {
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

type series struct {
	byDecision []prometheus.Counter
	byOp       []prometheus.Observer
}

// Metric names and labels.
const (
	HTTPRequestsMetric      = "idem_http_requests_total"
	HTTPStoreDurationMetric = "idem_http_store_duration_seconds"
	RPCRequestsMetric       = "idem_rpc_requests_total"
	RPCStoreDurationMetric  = "idem_rpc_store_duration_seconds"
	// RPCSystemLabel tells gRPC ("grpc") from Connect ("connect") in the
	// RPC families.
	RPCSystemLabel = "rpc_system"
)

// buckets are the bounds, in seconds, of the store latency histograms:
// 100µs to 2.5s (otelidem uses the same).
var buckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}

// New returns the metrics, registered on reg unless reg is nil (register
// the Metrics yourself then, or not at all). The HTTP series exist from
// the start, at zero; those of the other protocols from the first call an
// adapter of that protocol reports, all at once, at zero.
//
// A registry takes one set: New fails with a hint when reg already has
// them. One Metrics serves every adapter of a service; give each
// middleware of the same protocol its own Registerer, for instance
// prometheus.WrapRegistererWith(prometheus.Labels{"api": "payments"}, reg).
func New(reg prometheus.Registerer) (*Metrics, error) {
	newFamily := func(requests, requestsHelp, latency, latencyHelp string, labels ...string) family {
		return family{
			requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: requests, Help: requestsHelp}, append(labels, "outcome")),
			latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: latency, Help: latencyHelp, Buckets: buckets},
				append(labels[:len(labels):len(labels)], "op")),
		}
	}
	m := &Metrics{families: []family{
		newFamily(HTTPRequestsMetric, "Requests to protected methods, by the middleware's decision.",
			HTTPStoreDurationMetric, "Latency of idempotency store calls made by the HTTP middleware."),
		newFamily(RPCRequestsMetric, "Calls to protected RPC methods, by the interceptor's decision.",
			RPCStoreDurationMetric, "Latency of idempotency store calls made by the RPC interceptors.", RPCSystemLabel),
	}}
	m.seriesOf(observe.ProtocolHTTP)
	if reg == nil {
		return m, nil
	}
	var done []prometheus.Collector
	for _, f := range m.families {
		for _, c := range []prometheus.Collector{f.requests, f.latency} {
			if err := reg.Register(c); err != nil {
				for _, d := range done {
					reg.Unregister(d)
				}
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					return nil, configError("reg", "metrics already registered; give each middleware its own Registerer (e.g. prometheus.WrapRegistererWith with a distinct label value on each)")
				}
				return nil, err
			}
			done = append(done, c)
		}
	}
	return m, nil
}

// seriesOf returns p's children, creating them (all of them, at zero) the
// first time. An invalid (zero) protocol counts as HTTP.
func (m *Metrics) seriesOf(p observe.Protocol) *series {
	i := int(p) - 1
	if i < 0 || i >= len(m.series) {
		i = 0
	}
	if s := m.series[i].Load(); s != nil {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.series[i].Load(); s != nil {
		return s
	}
	p = observe.Protocol(i + 1)
	f, labels := m.families[0], []string(nil)
	switch {
	case p.IsRPC():
		f, labels = m.families[1], []string{p.String()}
	}
	s := &series{}
	for _, d := range observe.FinalDecisions() {
		for int(d) >= len(s.byDecision) {
			s.byDecision = append(s.byDecision, nil)
		}
		s.byDecision[d] = f.requests.WithLabelValues(append(labels, d.String())...)
	}
	for _, op := range observe.StoreOps() {
		for int(op) >= len(s.byOp) {
			s.byOp = append(s.byOp, nil)
		}
		s.byOp[op] = f.latency.WithLabelValues(append(labels[:len(labels):len(labels)], op.String())...)
	}
	m.series[i].Store(s)
	return s
}

// StoreCall observes the call's latency.
func (m *Metrics) StoreCall(_ context.Context, c observe.StoreCall) {
	s := m.seriesOf(c.Protocol)
	if int(c.Op) < len(s.byOp) && s.byOp[c.Op] != nil {
		s.byOp[c.Op].Observe(c.Duration.Seconds())
	}
}

// Decided counts a final decision (DecisionAcquired is not counted: the
// request gets its final decision later).
func (m *Metrics) Decided(_ context.Context, e observe.Event) {
	s := m.seriesOf(e.Protocol)
	if int(e.Decision) < len(s.byDecision) && s.byDecision[e.Decision] != nil {
		s.byDecision[e.Decision].Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range m.families {
		f.requests.Describe(ch)
		f.latency.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, f := range m.families {
		f.requests.Collect(ch)
		f.latency.Collect(ch)
	}
}

var (
	_ observe.Observer     = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// configError is the *idem.ConfigError of package promidem.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "promidem", Field: field, Reason: reason}
}
