package httpidem

// In-process cost of the middleware over memstore, against the bare
// handler, with allocations:
//
//	go test ./httpidem -run '^$' -bench InProcess -benchmem -count 5

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem/memstore"
)

type discardWriter struct{ h http.Header }

func (d *discardWriter) Header() http.Header         { return d.h }
func (d *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d *discardWriter) WriteHeader(int)             {}

func benchHandler() http.Handler {
	resp := []byte(`{"id":"ch_1","status":"succeeded","amount":4200}`)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	})
}

func BenchmarkInProcess(b *testing.B) {
	const body = `{"amount":4200,"currency":"EUR","description":"benchmark order"}`
	serve := func(b *testing.B, h http.Handler, key func(i int) string) {
		r, _ := http.NewRequest(http.MethodPost, "http://svc/charges", nil)
		r.Header.Set("Authorization", "Bearer sk_test_1")
		w := &discardWriter{}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			r.Body = io.NopCloser(strings.NewReader(body))
			r.ContentLength = int64(len(body))
			if key != nil {
				r.Header["Idempotency-Key"] = []string{key(i)}
			}
			w.h = make(http.Header, 4)
			h.ServeHTTP(w, r)
		}
	}
	mw := func(b *testing.B) *Middleware {
		s := memstore.New(nil)
		b.Cleanup(func() { s.Close() })
		m, err := New(s, &Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	b.Run("bare", func(b *testing.B) { serve(b, benchHandler(), nil) })
	b.Run("first", func(b *testing.B) {
		serve(b, mw(b).Handler(benchHandler()), func(i int) string { return "k" + strconv.Itoa(i) })
	})
	b.Run("replay", func(b *testing.B) {
		serve(b, mw(b).Handler(benchHandler()), func(int) string { return "same" })
	})
}

// BenchmarkMicro is the httptest micro-benchmark whose instructions per
// operation are counted with callgrind (BENCHMARKS.md): a new request and
// recorder per operation, the memory store, the same handler as
// BenchmarkInProcess.
//
//	go test -c -o /tmp/httpidem.test ./httpidem
//	GOGC=off GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//	    /tmp/httpidem.test -test.run '^$' -test.bench 'Micro/first$' -test.benchtime 2000x
//
// (and 4000x: the difference of the two totals over 2000 is the cost of one
// operation, without the process's start-up).
func BenchmarkMicro(b *testing.B) {
	const body = `{"amount":4200,"currency":"EUR","description":"benchmark order"}`
	serve := func(b *testing.B, h http.Handler, key func(i int) string) {
		b.ReportAllocs()
		for i := range b.N {
			r := httptest.NewRequest(http.MethodPost, "http://svc/charges", strings.NewReader(body))
			r.Header.Set("Authorization", "Bearer sk_test_1")
			r.Header.Set("Content-Type", "application/json")
			if key != nil {
				r.Header.Set("Idempotency-Key", key(i))
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Fatalf("status %d", w.Code)
			}
		}
	}
	mw := func(b *testing.B) *Middleware {
		s := memstore.New(&memstore.Config{SweepInterval: -1})
		b.Cleanup(func() { s.Close() })
		m, err := New(s, &Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return m
	}
	b.Run("bare", func(b *testing.B) { serve(b, benchHandler(), nil) })
	b.Run("first", func(b *testing.B) {
		serve(b, mw(b).Handler(benchHandler()), func(i int) string { return "k" + strconv.Itoa(i) })
	})
	b.Run("replay", func(b *testing.B) {
		serve(b, mw(b).Handler(benchHandler()), func(int) string { return "same" })
	})
}
