package otelidem

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/httpidem"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/idemkit/idem/otelidem"

// Attribute keys.
const (
	// KeyAttr is the hashed idempotency key (idem.Key.String), on every
	// span this package starts and on the request's span. Never the raw
	// key.
	KeyAttr = attribute.Key("idem.key")
	// OutcomeAttr is the request's final decision (httpidem.Decision's
	// String): on the request's span and on the complete span, and the
	// attribute of the requests counter.
	OutcomeAttr = attribute.Key("idem.outcome")
	// DecisionAttr is the store's answer, on the decide span: acquired,
	// replayed, mismatch, in_flight, or store_error, fail_open, canceled.
	DecisionAttr = attribute.Key("idem.decision")
	// ReplayedAttr says the answer was a stored response, on the request's
	// span.
	ReplayedAttr = attribute.Key("idem.replayed")
	// OpAttr is the store operation of the store latency histogram: begin,
	// complete, release or mark_started.
	OpAttr = attribute.Key("idem.op")
	// StatusAttr is the status the handler wrote, on the work span.
	StatusAttr = attribute.Key("http.response.status_code")
)

// Span names, one per httpidem.Phase.
const (
	SpanDecide   = "idem.decide"
	SpanWork     = "idem.work"
	SpanComplete = "idem.complete"
)

// Metric names.
const (
	RequestsMetric      = "idem.http.requests"
	StoreDurationMetric = "idem.http.store.duration"
)

// Config chooses the providers. A nil *Config means the defaults.
type Config struct {
	// TracerProvider starts the spans. Default otel.GetTracerProvider(),
	// looked up once, in New.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Observer is an httpidem.PhaseObserver that traces and measures the
// middleware with OpenTelemetry. Build it with New; it is safe for
// concurrent use.
type Observer struct {
	tracer   trace.Tracer
	requests metric.Int64Counter
	latency  metric.Float64Histogram
	// Measurement options built once per decision and op, so that a
	// request builds no attribute set.
	byDecision [][]metric.AddOption
	byOp       [][]metric.RecordOption
}

// New returns the observer. It fails only when the meter refuses an
// instrument.
func New(cfg *Config) (*Observer, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	meter := c.MeterProvider.Meter(ScopeName)
	o := &Observer{tracer: c.TracerProvider.Tracer(ScopeName)}
	var err error
	if o.requests, err = meter.Int64Counter(RequestsMetric,
		metric.WithDescription("Requests to protected methods, by the middleware's decision."),
		metric.WithUnit("{request}")); err != nil {
		return nil, err
	}
	if o.latency, err = meter.Float64Histogram(StoreDurationMetric,
		metric.WithDescription("Latency of idempotency store calls made by the HTTP middleware."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5)); err != nil {
		return nil, err
	}
	for _, d := range httpidem.FinalDecisions() {
		for int(d) >= len(o.byDecision) {
			o.byDecision = append(o.byDecision, nil)
		}
		o.byDecision[d] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(OutcomeAttr.String(d.String())))}
	}
	for _, op := range httpidem.StoreOps() {
		for int(op) >= len(o.byOp) {
			o.byOp = append(o.byOp, nil)
		}
		o.byOp[op] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(OpAttr.String(op.String())))}
	}
	return o, nil
}

// requestSpanKey holds, in a complete span's context, the request's own
// span, which Decided annotates too.
type requestSpanKey struct{}

// StartPhase starts the phase's span as a child of the span in ctx (the
// request's, from otelhttp or any other server instrumentation). The
// work span's context becomes the handler's, so the handler's spans are
// its children.
func (o *Observer) StartPhase(ctx context.Context, p httpidem.Phase, key string) (context.Context, func(httpidem.PhaseEnd)) {
	name := SpanWork
	switch p {
	case httpidem.PhaseDecide:
		name = SpanDecide
	case httpidem.PhaseComplete:
		name = SpanComplete
		ctx = context.WithValue(ctx, requestSpanKey{}, trace.SpanFromContext(ctx))
	}
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(KeyAttr.String(key)))
	return ctx, func(e httpidem.PhaseEnd) {
		switch p {
		case httpidem.PhaseDecide:
			span.SetAttributes(DecisionAttr.String(e.Decision.String()))
		case httpidem.PhaseWork:
			if e.Status != 0 {
				span.SetAttributes(StatusAttr.Int(e.Status))
			}
		}
		if e.Err != nil {
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Err.Error())
		}
		span.End()
	}
}

// StoreCall records the call's latency; a failed call is recorded as an
// error on the phase's span.
func (o *Observer) StoreCall(ctx context.Context, c httpidem.StoreCall) {
	if int(c.Op) < len(o.byOp) && o.byOp[c.Op] != nil {
		o.latency.Record(ctx, c.Duration.Seconds(), o.byOp[c.Op]...)
	}
	if c.Err != nil {
		span := trace.SpanFromContext(ctx)
		span.RecordError(c.Err, trace.WithAttributes(OpAttr.String(c.Op.String())))
		span.SetStatus(codes.Error, c.Op.String()+": "+c.Err.Error())
	}
}

// Decided counts a final decision and sets it on the request's span (and
// on the complete span when the decision was made while completing).
// DecisionAcquired is not counted: the final decision follows.
func (o *Observer) Decided(ctx context.Context, e httpidem.Event) {
	if !e.Decision.Final() {
		return
	}
	if int(e.Decision) < len(o.byDecision) && o.byDecision[e.Decision] != nil {
		o.requests.Add(ctx, 1, o.byDecision[e.Decision]...)
	}
	span := trace.SpanFromContext(ctx)
	rs, _ := ctx.Value(requestSpanKey{}).(trace.Span)
	if !span.IsRecording() && (rs == nil || !rs.IsRecording()) {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 3)
	attrs = append(attrs, OutcomeAttr.String(e.Decision.String()), ReplayedAttr.Bool(e.Replayed))
	if k := e.Key(); k != "" {
		attrs = append(attrs, KeyAttr.String(k))
	}
	span.SetAttributes(attrs...)
	if rs != nil {
		rs.SetAttributes(attrs...)
	}
}

var _ httpidem.PhaseObserver = (*Observer)(nil)
