package otelidem_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/otelidem"
)

// The spans of a first request and of its retry. In a service the
// request span comes from otelhttp (or any server instrumentation) and the
// providers are otel's global ones: otelidem.New(nil).
func Example() {
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	obs, err := otelidem.New(&otelidem.Config{TracerProvider: tp})
	if err != nil {
		panic(err)
	}
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{Observer: obs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	tracer := tp.Tracer("example")
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, span := tracer.Start(r.Context(), "charge card") // a child of idem.work
		span.End()
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":4200}`))
		r.Header.Set("Authorization", "Bearer sk_alice")
		r.Header.Set("Idempotency-Key", `"order-17"`)
		ctx, span := tracer.Start(r.Context(), "POST /charges") // otelhttp's, in a service
		h.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
		span.End()
	}

	names := map[string]string{}
	for _, s := range spans.Ended() {
		names[s.SpanContext().SpanID().String()] = s.Name()
	}
	for _, s := range spans.Ended() {
		line := s.Name() + " (in " + names[s.Parent().SpanID().String()] + ")"
		for _, kv := range s.Attributes() {
			if kv.Key == otelidem.OutcomeAttr || kv.Key == otelidem.DecisionAttr {
				line += " " + string(kv.Key) + "=" + kv.Value.AsString()
			}
		}
		fmt.Println(strings.Replace(line, " (in )", "", 1))
	}
	// Output:
	// idem.decide (in POST /charges) idem.decision=acquired
	// charge card (in idem.work)
	// idem.work (in POST /charges)
	// idem.complete (in POST /charges) idem.outcome=executed
	// POST /charges idem.outcome=executed
	// idem.decide (in POST /charges) idem.decision=replayed
	// POST /charges idem.outcome=replayed
}
