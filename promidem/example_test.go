package promidem_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/observe"
	"github.com/idemkit/idem/promidem"
)

// The middleware's metrics on a registry, served as /metrics.
func Example() {
	reg := prometheus.NewRegistry()
	metrics, err := promidem.New(reg)
	if err != nil {
		panic(err)
	}
	store := memstore.New(nil)
	defer store.Close()
	mw, err := httpidem.New(store, &httpidem.Config{Observer: metrics, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
	}))
	for range 2 {
		r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{"amount":4200}`))
		r.Header.Set("Authorization", "Bearer sk_alice")
		r.Header.Set("Idempotency-Key", `"order-17"`)
		h.ServeHTTP(httptest.NewRecorder(), r)
	}

	w := httptest.NewRecorder()
	promhttp.HandlerFor(reg, promhttp.HandlerOpts{}).ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	for line := range strings.SplitSeq(w.Body.String(), "\n") {
		if strings.HasPrefix(line, `idem_http_requests_total{outcome="executed"}`) ||
			strings.HasPrefix(line, `idem_http_requests_total{outcome="replayed"}`) ||
			strings.HasPrefix(line, `idem_http_store_duration_seconds_count{op="begin"}`) {
			fmt.Println(line)
		}
	}
	// Output:
	// idem_http_requests_total{outcome="executed"} 1
	// idem_http_requests_total{outcome="replayed"} 1
	// idem_http_store_duration_seconds_count{op="begin"} 2
}

// Two middlewares on one registry, told apart by a label.
func Example_severalMiddlewares() {
	reg := prometheus.NewRegistry()
	for _, api := range []string{"payments", "orders"} {
		if _, err := promidem.New(prometheus.WrapRegistererWith(prometheus.Labels{"api": api}, reg)); err != nil {
			panic(err)
		}
	}
	_, err := promidem.New(reg)
	fmt.Println(err != nil)
	// Output:
	// true
}

// The metrics beside an alerting hook: Observers calls both.
func Example_withHook() {
	metrics, err := promidem.New(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	alert := observe.ObserverFunc(func(_ context.Context, e observe.Event) {
		if e.Decision == observe.DecisionStoreError {
			fmt.Println("page the on-call: idempotency store failing:", e.Err != nil)
		}
	})
	mem := memstore.New(nil)
	defer mem.Close()
	mw, err := httpidem.New(downStore{mem}, &httpidem.Config{Observer: observe.Observers(metrics, alert), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	r := httptest.NewRequest("POST", "/charges", strings.NewReader(`{}`))
	r.Header.Set("Authorization", "Bearer sk_alice")
	r.Header.Set("Idempotency-Key", `"order-18"`)
	w := httptest.NewRecorder()
	mw.Handler(http.NotFoundHandler()).ServeHTTP(w, r)
	fmt.Println(w.Code)
	// Output:
	// page the on-call: idempotency store failing: true
	// 503
}

// downStore is a store whose server cannot be reached.
type downStore struct{ idem.Store }

func (downStore) Begin(context.Context, idem.BeginRequest) (idem.Claim, error) {
	return idem.Claim{}, idem.StoreError(context.Background(), "example", errors.New("connection refused"))
}
