package promidem_test

// The cost of the Prometheus metrics on a first request, against the
// middleware without an observer:
//
//	go test ./promidem -run '^$' -bench . -benchmem

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func BenchmarkObserved(b *testing.B) {
	created := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	run := func(b *testing.B, h http.Handler) {
		b.ReportAllocs()
		for i := range b.N {
			if c := post(h, "k"+strconv.Itoa(i)); c != http.StatusCreated {
				b.Fatalf("status %d", c)
			}
		}
	}
	b.Run("none", func(b *testing.B) { run(b, newMiddleware(b, nil, created)) })
	b.Run("prometheus", func(b *testing.B) { run(b, newMiddleware(b, prometheus.NewRegistry(), created)) })
}
