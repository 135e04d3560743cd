package peers

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gofiber/fiber/v3"
	fiberidem "github.com/gofiber/fiber/v3/middleware/idempotency"
	"github.com/valyala/fasthttp"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/memstore"
)

const (
	reqBody  = `{"amount":4200,"currency":"EUR","description":"benchmark order"}`
	respBody = `{"id":"ch_1","status":"succeeded","amount":4200}`
)

// key returns the i-th key: 36 characters, the length of a UUID, which
// fiber's default validation requires.
func key(i int) string { return fmt.Sprintf("k-%034d", i) }

// next numbers first requests, unique across runs of the benchmark.
var next atomic.Int64

// handler is the net/http service every net/http system protects.
func handler() http.Handler {
	resp := []byte(respBody)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(resp)
	})
}

// serveHTTP sends one request through h: a new httptest request and
// recorder, as a server would give the handler a new request.
func serveHTTP(h http.Handler, k string) int {
	r := httptest.NewRequest(http.MethodPost, "http://svc/charges", strings.NewReader(reqBody))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Authorization", "Bearer sk_test_1")
	if k != "" {
		r.Header.Set("Idempotency-Key", k)
		r.Header.Set("X-Idempotency-Key", k)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w.Code
}

// fiberApp is the same service on fiber, with or without its
// idempotency middleware (memory storage and lock, its defaults).
func fiberApp(idem bool) fasthttp.RequestHandler {
	app := fiber.New()
	if idem {
		app.Use(fiberidem.New())
	}
	resp := []byte(respBody)
	app.Post("/charges", func(c fiber.Ctx) error {
		_ = c.Body()
		c.Set("Content-Type", "application/json")
		return c.Status(http.StatusCreated).Send(resp)
	})
	return app.Handler()
}

// serveFiber sends one request through h on a new fasthttp context.
func serveFiber(h fasthttp.RequestHandler, k string) int {
	ctx := new(fasthttp.RequestCtx)
	req := &ctx.Request
	req.Header.SetMethod(http.MethodPost)
	req.SetRequestURI("http://svc/charges")
	req.Header.SetContentType("application/json")
	req.Header.Set("Authorization", "Bearer sk_test_1")
	if k != "" {
		req.Header.Set("X-Idempotency-Key", k)
	}
	req.SetBodyString(reqBody)
	h(ctx)
	return ctx.Response.StatusCode()
}

type system struct {
	name  string
	serve func(k string) int
}

func systems(tb testing.TB) []system {
	store := memstore.New(nil)
	tb.Cleanup(func() { store.Close() })
	mw, err := httpidem.New(store, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		tb.Fatal(err)
	}
	bare, idem := handler(), mw.Handler(handler())
	fbare, fidem := fiberApp(false), fiberApp(true)
	return []system{
		{"bare", func(k string) int { return serveHTTP(bare, k) }},
		{"idem", func(k string) int { return serveHTTP(idem, k) }},
		{"fiber-bare", func(k string) int { return serveFiber(fbare, k) }},
		{"fiber", func(k string) int { return serveFiber(fidem, k) }},
	}
}

// BenchmarkPeers: first requests (a new key each) and replays (one key,
// stored before the timer starts) for every system. The bare handlers
// get the same requests, keys included, and ignore them.
func BenchmarkPeers(b *testing.B) {
	for _, s := range systems(b) {
		b.Run(s.name+"/first", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if code := s.serve(key(int(next.Add(1)))); code != http.StatusCreated {
					b.Fatalf("status %d", code)
				}
			}
		})
		b.Run(s.name+"/replay", func(b *testing.B) {
			k := key(-1)
			s.serve(k)
			b.ReportAllocs()
			for b.Loop() {
				if code := s.serve(k); code != http.StatusCreated {
					b.Fatalf("status %d", code)
				}
			}
		})
	}
}

// TestPeersAnswer checks that every system answers the first request and
// its replay with the handler's 201, so that the benchmark compares
// systems that work.
func TestPeersAnswer(t *testing.T) {
	for _, s := range systems(t) {
		for range 2 {
			if code := s.serve(key(7)); code != http.StatusCreated {
				t.Errorf("%s: status %d", s.name, code)
			}
		}
	}
}
