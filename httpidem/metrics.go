package httpidem

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// outcome is the label of idem_http_requests_total and of the decision
// log line.
type outcome uint8

const (
	outcomeExecuted      outcome = iota // handler ran, response stored
	outcomeReleased                     // handler ran, status not stored (5xx, 408…) or panic: claim released
	outcomeReplayed                     // stored response replayed
	outcomeInFlight                     // 409: first request still running
	outcomeMismatch                     // 422: key reused with another request
	outcomeRejected                     // 400/413: bad key, scope or body
	outcomeStoreError                   // 503/500: store failed
	outcomeKeyless                      // protected method without a key, passed through
	outcomeNotReplayable                // 409: completed, response not stored
	outcomeFailOpen                     // store failed, handler ran unprotected (FailOpen)
	outcomeCanceled                     // client went away before a decision
	outcomeUnknown                      // outcome unknown: held (stored) or released per UnknownOutcome
	outcomeSkipped                      // Config.SkipFunc said skip: passed through
	numOutcomes
)

var outcomeNames = [numOutcomes]string{
	"executed", "released", "replayed", "in_flight", "mismatch", "rejected",
	"store_error", "keyless", "not_replayable", "fail_open", "canceled",
	"outcome_unknown", "skipped",
}

func (o outcome) String() string { return outcomeNames[o] }

// Store operations timed by idem_http_store_duration_seconds.
const (
	opBegin = iota
	opComplete
	opRelease
	opMark
	numOps
)

var opNames = [numOps]string{"begin", "complete", "release", "mark_started"}

// metrics holds pre-resolved children so the request path does no label
// lookups.
type metrics struct {
	requests [numOutcomes]prometheus.Counter
	store    [numOps]prometheus.Observer
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	req := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "idem_http_requests_total",
		Help: "Requests to protected methods, by the middleware's decision.",
	}, []string{"outcome"})
	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "idem_http_store_duration_seconds",
		Help:    "Latency of idempotency store calls made by the HTTP middleware.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"op"})
	m := &metrics{}
	for i := range m.requests {
		m.requests[i] = req.WithLabelValues(outcomeNames[i])
	}
	for i := range m.store {
		m.store[i] = lat.WithLabelValues(opNames[i])
	}
	if reg != nil {
		for i, c := range []prometheus.Collector{req, lat} {
			if err := reg.Register(c); err != nil {
				if i > 0 {
					reg.Unregister(req)
				}
				var are prometheus.AlreadyRegisteredError
				if errors.As(err, &are) {
					return nil, errors.New("httpidem: metrics already registered; give each middleware its own Registerer (e.g. prometheus.WrapRegistererWith with a distinct label value on each)")
				}
				return nil, err
			}
		}
	}
	return m, nil
}

func (m *metrics) observe(op int, since time.Time) {
	m.store[op].Observe(time.Since(since).Seconds())
}
