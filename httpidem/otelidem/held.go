package otelidem

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/idemkit/idem"
)

// Metric names of Held.
const (
	HeldKeysMetric    = "idem.held_keys"
	ResolutionsMetric = "idem.resolutions"
)

// Attributes of the resolutions counter.
const (
	// ByAttr: who resolved a held key, "operator" or "service".
	ByAttr = attribute.Key("idem.resolved_by")
	// HowAttr: "result" (a result was stored) or "release".
	HowAttr = attribute.Key("idem.resolution")
)

// Lister lists a store's records by state: memstore, sqlstore,
// redisstore and tiered have this List.
type Lister interface {
	List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
}

// HeldConfig tunes Held. A nil *HeldConfig means the defaults.
type HeldConfig struct {
	// MeterProvider makes the metrics. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
	// Interval is the least time between two counts of the held keys: a
	// collection in between reports the last count (on SQL stores a count
	// scans the table). Default one minute.
	Interval time.Duration
	// Limit bounds a count: with Limit held keys or more, the gauge reads
	// Limit. Default 10,000.
	Limit int
	// Timeout bounds one count. Default 2s.
	Timeout time.Duration
}

// Held reports held keys (idem.StateHeld: the outcome is unknown and the
// key waits to be resolved): the gauge idem.held_keys, counted with List
// at most once per Interval, and the counter idem.resolutions with
// idem.resolved_by and idem.resolution. Alert on the gauge staying above
// zero: each held key is a customer waiting for someone to act.
type Held struct {
	l           Lister
	cfg         HeldConfig
	resolutions metric.Int64Counter

	mu      sync.Mutex
	counted time.Time
	count   int64
	err     error
}

// NewHeld returns the metrics of the held keys of l (nil: only the
// counter).
func NewHeld(l Lister, cfg *HeldConfig) (*Held, error) {
	var c HeldConfig
	if cfg != nil {
		c = *cfg
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
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
	meter := c.MeterProvider.Meter(ScopeName)
	h := &Held{l: l, cfg: c}
	var err error
	if h.resolutions, err = meter.Int64Counter(ResolutionsMetric,
		metric.WithDescription("Held keys resolved, by operator or service, with a result or a release."),
		metric.WithUnit("{key}")); err != nil {
		return nil, err
	}
	if l != nil {
		if _, err = meter.Int64ObservableGauge(HeldKeysMetric,
			metric.WithDescription("Keys held because their outcome is unknown, waiting to be resolved."),
			metric.WithUnit("{key}"),
			metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
				n, err := h.held(ctx)
				if err == nil {
					o.Observe(n)
				}
				return nil // a failed count leaves the gauge out, not at zero
			})); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Resolved counts one resolution: by "operator" or "service", how
// "result" or "release".
func (h *Held) Resolved(by, how string) {
	h.resolutions.Add(context.Background(), 1, metric.WithAttributes(ByAttr.String(by), HowAttr.String(how)))
}

func (h *Held) held(ctx context.Context) (int64, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.counted.IsZero() && time.Since(h.counted) < h.cfg.Interval {
		return h.count, h.err
	}
	ctx, cancel := context.WithTimeout(ctx, h.cfg.Timeout)
	defer cancel()
	recs, err := h.l.List(ctx, idem.StateHeld, false, h.cfg.Limit)
	h.counted, h.count, h.err = time.Now(), int64(len(recs)), err
	return h.count, h.err
}
