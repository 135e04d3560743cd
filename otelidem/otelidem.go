package otelidem

import (
	"context"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/idemkit/idem/otelidem"

// Attribute keys.
const (
	// KeyAttr is the hashed idempotency key (idem.Key.String), on every
	// span this package starts and on the request's span. Never the raw
	// key.
	KeyAttr = attribute.Key("idem.key")
	// OutcomeAttr is the request's final decision (observe.Decision's
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
	// StatusAttr is the HTTP status the handler wrote, on the work span
	// of an HTTP request.
	StatusAttr = attribute.Key("http.response.status_code")
	// GRPCStatusAttr is the status code a gRPC handler answered (0 is OK),
	// on the work span of a gRPC call.
	GRPCStatusAttr = attribute.Key("rpc.grpc.status_code")
	// ConnectErrorAttr is the code of the error a Connect handler
	// answered ("not_found", "aborted", …), on the work span of a Connect
	// call; a success has none.
	ConnectErrorAttr = attribute.Key("rpc.connect_rpc.error_code")
	// RPCSystemAttr is the RPC system, "grpc" or "connect_rpc": on every
	// span of an RPC call, and an attribute of the RPC metrics.
	RPCSystemAttr = attribute.Key("rpc.system")
)

// Span names, one per idem.AttemptPhase.
const (
	SpanDecide   = "idem.decide"
	SpanWork     = "idem.work"
	SpanComplete = "idem.complete"
)

// Metric names, one pair for HTTP and one for RPC.
const (
	RequestsMetric         = "idem.http.requests"
	StoreDurationMetric    = "idem.http.store.duration"
	RPCRequestsMetric      = "idem.rpc.requests"
	RPCStoreDurationMetric = "idem.rpc.store.duration"
)

// Config chooses the providers. A nil *Config means the defaults.
type Config struct {
	// TracerProvider starts the spans. Default otel.GetTracerProvider(),
	// looked up once, in New.
	TracerProvider trace.TracerProvider
	// MeterProvider makes the metrics. Default otel.GetMeterProvider().
	MeterProvider metric.MeterProvider
}

// Observer is an observe.PhaseObserver that traces and measures idem's
// adapters with OpenTelemetry: the HTTP middleware, the gRPC and Connect
// interceptors. Build it with New; it is safe for concurrent
// use.
type Observer struct {
	tracer trace.Tracer
	// By Protocol: the instruments, and the measurement options built
	// once per decision and op, so that a request builds no attribute
	// set.
	byProtocol [numProtocols]instruments
}

// numProtocols: observe's protocols, and the zero one (counted as HTTP).
const numProtocols = 4

type instruments struct {
	requests   metric.Int64Counter
	latency    metric.Float64Histogram
	byDecision [][]metric.AddOption
	byOp       [][]metric.RecordOption
	system     attribute.KeyValue // RPCSystemAttr, for RPC
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
	kinds := []struct {
		requests, requestsDesc, unit, latency, latencyDesc string
	}{
		{RequestsMetric, "Requests to protected methods, by the middleware's decision.", "{request}",
			StoreDurationMetric, "Latency of idempotency store calls made by the HTTP middleware."},
		{RPCRequestsMetric, "Calls to protected RPC methods, by the interceptor's decision.", "{call}",
			RPCStoreDurationMetric, "Latency of idempotency store calls made by the RPC interceptors."},
	}
	var made [2]instruments
	for i, k := range kinds {
		var err error
		if made[i].requests, err = meter.Int64Counter(k.requests, metric.WithDescription(k.requestsDesc), metric.WithUnit(k.unit)); err != nil {
			return nil, err
		}
		if made[i].latency, err = meter.Float64Histogram(k.latency, metric.WithDescription(k.latencyDesc), metric.WithUnit("s"),
			metric.WithExplicitBucketBoundaries(.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5)); err != nil {
			return nil, err
		}
	}
	for p := range numProtocols {
		proto := observe.Protocol(p)
		in := made[0]
		var extra []attribute.KeyValue
		switch {
		case proto.IsRPC():
			in = made[1]
			in.system = rpcSystem(proto)
			extra = []attribute.KeyValue{in.system}
		}
		for _, d := range observe.FinalDecisions() {
			for int(d) >= len(in.byDecision) {
				in.byDecision = append(in.byDecision, nil)
			}
			in.byDecision[d] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(append(extra[:len(extra):len(extra)], OutcomeAttr.String(d.String()))...))}
		}
		for _, op := range observe.StoreOps() {
			for int(op) >= len(in.byOp) {
				in.byOp = append(in.byOp, nil)
			}
			in.byOp[op] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(append(extra[:len(extra):len(extra)], OpAttr.String(op.String()))...))}
		}
		o.byProtocol[p] = in
	}
	return o, nil
}

// rpcSystem is the rpc.system attribute of an RPC protocol.
func rpcSystem(p observe.Protocol) attribute.KeyValue {
	if p == observe.ProtocolConnect {
		return RPCSystemAttr.String("connect_rpc")
	}
	return RPCSystemAttr.String("grpc")
}

// of returns p's instruments; an invalid protocol counts as HTTP.
func (o *Observer) of(p observe.Protocol) *instruments {
	if int(p) >= len(o.byProtocol) {
		p = 0
	}
	return &o.byProtocol[p]
}

// requestSpanKey holds, in a complete span's context, the request's own
// span, which Decided annotates too.
type requestSpanKey struct{}

// StartPhase starts the phase's span as a child of the span in ctx (the
// request's, from otelhttp or any other server instrumentation). The
// work span's context becomes the handler's, so the handler's spans are
// its children.
func (o *Observer) StartPhase(ctx context.Context, p idem.AttemptPhase, key string) (context.Context, func(observe.PhaseEnd)) {
	name := SpanWork
	switch p {
	case idem.PhaseDecide:
		name = SpanDecide
	case idem.PhaseComplete:
		name = SpanComplete
		ctx = context.WithValue(ctx, requestSpanKey{}, trace.SpanFromContext(ctx))
	}
	ctx, span := o.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(KeyAttr.String(key)))
	return ctx, func(e observe.PhaseEnd) {
		switch p {
		case idem.PhaseDecide:
			span.SetAttributes(DecisionAttr.String(e.Decision.String()))
		case idem.PhaseWork:
			workStatus(span, e)
		}
		if e.Protocol.IsRPC() {
			span.SetAttributes(rpcSystem(e.Protocol))
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
func (o *Observer) StoreCall(ctx context.Context, c observe.StoreCall) {
	if in := o.of(c.Protocol); int(c.Op) < len(in.byOp) && in.byOp[c.Op] != nil {
		in.latency.Record(ctx, c.Duration.Seconds(), in.byOp[c.Op]...)
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
func (o *Observer) Decided(ctx context.Context, e observe.Event) {
	if !e.Decision.Final() {
		return
	}
	if in := o.of(e.Protocol); int(e.Decision) < len(in.byDecision) && in.byDecision[e.Decision] != nil {
		in.requests.Add(ctx, 1, in.byDecision[e.Decision]...)
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

// workStatus sets the status the work answered on its span, with the
// attribute of its protocol's semantic conventions.
func workStatus(span trace.Span, e observe.PhaseEnd) {
	switch e.Protocol {
	case observe.ProtocolGRPC:
		if e.Err == nil { // a panic answered no code
			span.SetAttributes(GRPCStatusAttr.Int(e.Status))
		}
	case observe.ProtocolConnect:
		if e.Err == nil && e.Status > 0 && e.Status < len(connectCodes) {
			span.SetAttributes(ConnectErrorAttr.String(connectCodes[e.Status]))
		}
	default:
		if e.Status != 0 {
			span.SetAttributes(StatusAttr.Int(e.Status))
		}
	}
}

// connectCodes are Connect's error code names, by number (they are
// gRPC's numbers).
var connectCodes = [...]string{
	"", "canceled", "unknown", "invalid_argument", "deadline_exceeded",
	"not_found", "already_exists", "permission_denied", "resource_exhausted",
	"failed_precondition", "aborted", "out_of_range", "unimplemented",
	"internal", "unavailable", "data_loss", "unauthenticated",
}

var _ observe.PhaseObserver = (*Observer)(nil)
