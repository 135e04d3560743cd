package promidem

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

// Lister lists a store's records by state: memstore, sqlstore,
// redisstore and tiered have this List.
type Lister interface {
	List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
}

// HeldConfig tunes Held. A nil *HeldConfig means the defaults.
type HeldConfig struct {
	// Interval is the least time between two counts of the held keys (on
	// SQL stores a count scans the table): a
	// scrape in between gets the last count. Default one minute.
	Interval time.Duration
	// Limit bounds a count: with Limit held keys or more, the gauge reads
	// Limit. Default 10,000.
	Limit int
	// Timeout bounds one count. Default 2s.
	Timeout time.Duration
}

// Held keeps two metrics of held keys (idem.StateHeld: the outcome is
// unknown and the key waits to be resolved):
//
//	idem_held_keys                   gauge: held keys in the store, counted
//	                                 with List at most once per Interval
//	idem_resolutions_total{by, how}  counter: held keys resolved, by
//	                                 "operator" or "service" (a resolver),
//	                                 how "result" or "release"
//
// A held key is a customer waiting for someone to act: alert on the gauge
// staying above zero.
type Held struct {
	l           Lister
	cfg         HeldConfig
	gauge       *prometheus.Desc
	resolutions *prometheus.CounterVec

	mu      sync.Mutex
	counted time.Time
	count   float64
	err     bool
}

// NewHeld returns the metrics of the held keys of l (nil: only the
// counter), registered on reg unless reg is nil.
func NewHeld(reg prometheus.Registerer, l Lister, cfg *HeldConfig) (*Held, error) {
	var c HeldConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Interval <= 0 {
		c.Interval = time.Minute
	}
	if c.Limit <= 0 {
		c.Limit = 10000
	}
	if c.Timeout <= 0 {
		c.Timeout = 2 * time.Second
	}
	h := &Held{
		l:     l,
		cfg:   c,
		gauge: prometheus.NewDesc("idem_held_keys", "Keys held because their outcome is unknown, waiting to be resolved (idem keys list --state held).", nil, nil),
		resolutions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_resolutions_total",
			Help: "Held keys resolved, by operator or service, with a result or a release.",
		}, []string{"by", "how"}),
	}
	for _, by := range []string{"operator", "service"} {
		for _, how := range []string{"result", "release"} {
			h.resolutions.WithLabelValues(by, how)
		}
	}
	if reg != nil {
		if err := reg.Register(h); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Resolved counts one resolution: by "operator" or "service", how
// "result" or "release".
func (h *Held) Resolved(by, how string) { h.resolutions.WithLabelValues(by, how).Inc() }

// Describe implements prometheus.Collector.
func (h *Held) Describe(ch chan<- *prometheus.Desc) {
	if h.l != nil {
		ch <- h.gauge
	}
	h.resolutions.Describe(ch)
}

// Collect implements prometheus.Collector. A count that fails leaves the
// gauge out of the scrape (rather than reporting zero).
func (h *Held) Collect(ch chan<- prometheus.Metric) {
	if h.l != nil {
		if n, ok := h.held(); ok {
			ch <- prometheus.MustNewConstMetric(h.gauge, prometheus.GaugeValue, n)
		}
	}
	h.resolutions.Collect(ch)
}

func (h *Held) held() (float64, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.counted.IsZero() && time.Since(h.counted) < h.cfg.Interval {
		return h.count, !h.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), h.cfg.Timeout)
	defer cancel()
	recs, err := h.l.List(ctx, idem.StateHeld, false, h.cfg.Limit)
	h.counted, h.count, h.err = time.Now(), float64(len(recs)), err != nil
	return h.count, !h.err
}
