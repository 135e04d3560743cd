package httpidem

// In-process cost of the middleware over memstore, against the bare
// handler, with allocations:
//
//	go test ./httpidem -run '^$' -bench InProcess -benchmem -count 5

import (
	"io"
	"log/slog"
	"net/http"
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
