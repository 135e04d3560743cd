package otelidem_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/otelidem"
	"github.com/idemkit/idem/otelidem/internal/oteltest"
)

// The client's attempts and waits are events on the caller's span: a 503
// retried after its Retry-After, then the answer.
func TestClientObserverEvents(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	defer srv.Close()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	tr, err := idemclient.New(&idemclient.Config{Observer: otelidem.ClientObserver()})
	if err != nil {
		t.Fatal(err)
	}
	defer http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	ctx, span := tp.Tracer("test").Start(context.Background(), "pay")
	req, _ := http.NewRequestWithContext(idemclient.WithKey(ctx, oteltest.RawPrefix+"-client"), http.MethodPost, srv.URL, strings.NewReader("x"))
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	span.End()

	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	var got []string
	for _, ev := range spans[0].Events() {
		line := ev.Name
		for _, a := range ev.Attributes {
			if strings.Contains(a.Value.String(), oteltest.RawPrefix) {
				t.Errorf("event %s carries the raw key in %s", ev.Name, a.Key)
			}
			if a.Key == otelidem.DecisionAttr || a.Key == otelidem.StatusAttr || a.Key == otelidem.ReasonAttr {
				line += " " + a.Value.String()
			}
		}
		got = append(got, line)
	}
	want := []string{"idem.attempt 503 retry unavailable", "idem.wait", "idem.attempt 201 done"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", got, want)
	}
	if spans[0].Status().Code == codes.Error {
		t.Fatal("a request that succeeded marked its span as an error")
	}
}
