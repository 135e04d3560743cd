package otelidem_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/httpidem/otelidem"
	"github.com/idemkit/idem/idemclient"
)

// idemclient's retries as events on the caller's span.
func ExampleClientObserver() {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))

	tr, _ := idemclient.New(&idemclient.Config{Observer: otelidem.ClientObserver()})
	client := &http.Client{Transport: tr}
	ctx, span := tp.Tracer("shop").Start(context.Background(), "checkout")
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/payments", nil)
	if resp, err := client.Do(req); err == nil {
		resp.Body.Close()
	}
	span.End()
	for _, ev := range rec.Ended()[0].Events() {
		fmt.Println(ev.Name)
	}
	// Output:
	// idem.attempt
	// idem.wait
	// idem.attempt
}
