package otelidem_test

// The cost of tracing and measuring a first request and a replay, against
// the middleware without an observer:
//
//	go test ./httpidem/otelidem -run '^$' -bench . -benchmem

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/otelidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/observe"
)

func BenchmarkObserved(b *testing.B) {
	const body = `{"amount":4200,"currency":"EUR"}`
	build := func(b *testing.B, obs observe.Observer) http.Handler {
		s := memstore.New(&memstore.Config{SweepInterval: -1})
		b.Cleanup(func() { s.Close() })
		mw, err := httpidem.New(s, &httpidem.Config{Observer: obs, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
			w.WriteHeader(http.StatusCreated)
		}))
	}
	otelObs := func(b *testing.B) observe.Observer {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		b.Cleanup(func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) })
		o, err := otelidem.New(&otelidem.Config{TracerProvider: tp, MeterProvider: mp})
		if err != nil {
			b.Fatal(err)
		}
		return o
	}
	run := func(b *testing.B, h http.Handler, key func(int) string) {
		b.ReportAllocs()
		for i := range b.N {
			r := httptest.NewRequest(http.MethodPost, "/charges", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer sk_test_1")
			r.Header.Set("Idempotency-Key", key(i))
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	first := func(i int) string { return "k" + strconv.Itoa(i) }
	same := func(int) string { return "same" }
	b.Run("first/none", func(b *testing.B) { run(b, build(b, nil), first) })
	b.Run("first/otel", func(b *testing.B) { run(b, build(b, otelObs(b)), first) })
	b.Run("replay/none", func(b *testing.B) { run(b, build(b, nil), same) })
	b.Run("replay/otel", func(b *testing.B) { run(b, build(b, otelObs(b)), same) })
}
