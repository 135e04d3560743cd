package otelidem

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem/idemclient"
)

// Client span events and their attributes.
const (
	// EventAttempt is the span event of one idemclient attempt, with
	// AttemptAttr, StatusAttr (0 after a transport error), ReplayedAttr,
	// DecisionAttr (done, retry, give_up, outcome_unknown) and, when there
	// is one, ReasonAttr; after a transport error, exception.message.
	EventAttempt = "idem.attempt"
	// EventWait is the span event of a wait before the next attempt, with
	// AttemptAttr (the attempt that follows) and WaitAttr.
	EventWait = "idem.wait"

	AttemptAttr = attribute.Key("idem.attempt")
	ReasonAttr  = attribute.Key("idem.reason")
	WaitAttr    = attribute.Key("idem.wait_ms")
)

// ClientObserver returns an idemclient.Observer that records each attempt
// and each wait of an idemclient.Transport as an event on the span of the
// request's context (the caller's span, or an otelhttp client span around
// the Transport): a trace shows the retries of one logical request, their
// answers, what followed each one and why. A request that ends with an
// outcome-unknown answer, or gives up after an attempt that may have run,
// sets the span's status to Error. A context without a recording span
// costs nothing.
//
// The key is not recorded: it is the caller's (an order number may be
// one), and traces leave the process.
func ClientObserver() idemclient.Observer {
	return idemclient.ObserverFunc(func(ctx context.Context, e idemclient.Event) {
		span := trace.SpanFromContext(ctx)
		if !span.IsRecording() {
			return
		}
		switch e.Kind {
		case idemclient.EventAttempt:
			attrs := []attribute.KeyValue{
				AttemptAttr.Int(e.Attempt),
				StatusAttr.Int(e.Status),
				ReplayedAttr.Bool(e.Replayed),
				DecisionAttr.String(e.Decision.String()),
			}
			if e.Reason != "" {
				attrs = append(attrs, ReasonAttr.String(string(e.Reason)))
			}
			if e.Err != nil {
				attrs = append(attrs, attribute.String("exception.message", e.Err.Error()))
			}
			span.AddEvent(EventAttempt, trace.WithAttributes(attrs...))
			switch e.Decision {
			case idemclient.DecisionOutcomeUnknown:
				span.SetStatus(codes.Error, "outcome unknown")
			case idemclient.DecisionGiveUp:
				span.SetStatus(codes.Error, "retries gave up: "+string(e.Reason))
			}
		case idemclient.EventWait:
			span.AddEvent(EventWait, trace.WithAttributes(AttemptAttr.Int(e.Attempt), WaitAttr.Int64(e.Duration.Milliseconds())))
		}
	})
}
