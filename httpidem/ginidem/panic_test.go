package ginidem_test

import (
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/ginidem"
	"github.com/idemkit/idem/memstore"
)

// gzipMiddleware compresses what the rest of the chain writes, as
// gin-contrib/gzip does (nothing is written when the chain wrote nothing).
func gzipMiddleware(c *gin.Context) {
	if !strings.Contains(c.GetHeader("Accept-Encoding"), "gzip") {
		c.Next()
		return
	}
	zw := gzip.NewWriter(c.Writer)
	c.Header("Content-Encoding", "gzip")
	c.Header("Vary", "Accept-Encoding")
	c.Writer = &gzipWriter{ResponseWriter: c.Writer, zw: zw}
	defer func() {
		if c.Writer.Size() < 0 {
			zw.Reset(io.Discard)
		}
		zw.Close()
	}()
	c.Next()
}

type gzipWriter struct {
	gin.ResponseWriter
	zw *gzip.Writer
}

func (g *gzipWriter) Write(b []byte) (int, error) {
	g.Header().Del("Content-Length")
	return g.zw.Write(b)
}

func (g *gzipWriter) WriteString(s string) (int, error) { return g.Write([]byte(s)) }

// panicServer serves /early (panics before writing on its first run, then
// answers 201) and /late (writes 200 and then panics) with the chain
// outer..., ginidem, inner..., handler.
func panicServer(t *testing.T, outer, inner []gin.HandlerFunc) (url string, early, late *atomic.Int64, deadCtx *atomic.Int64) {
	t.Helper()
	gin.SetMode(gin.ReleaseMode)
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	m, err := httpidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	early, late, deadCtx = new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	r := gin.New()
	r.Use(outer...)
	r.Use(func(c *gin.Context) { // right outside the adapter: the context must be live, panics included
		defer func() {
			if c.Request.Context().Err() != nil {
				deadCtx.Add(1)
			}
		}()
		c.Next()
	})
	r.Use(ginidem.Middleware(m))
	r.Use(inner...)
	r.POST("/early", func(c *gin.Context) {
		if early.Add(1) == 1 {
			panic("handler bug")
		}
		c.String(http.StatusCreated, "created")
	})
	r.POST("/late", func(c *gin.Context) {
		late.Add(1)
		c.String(http.StatusOK, "partial")
		panic("handler bug after writing")
	})
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv.URL, early, late, deadCtx
}

// fresh sends each request on a new connection: http.Transport resends a
// request with an Idempotency-Key whose reused connection was cut, which
// would hide a cut answer behind the retry's.
var fresh = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func sendGzip(t *testing.T, url, key string) (answer, error) {
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"amount":100}`))
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Authorization", "Bearer alice")
	resp, err := fresh.Do(req) // asks for gzip and decodes it
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{resp.StatusCode, string(b), resp.Header.Get("Idempotent-Replayed") == "true"}, err
}

// TestPanicNeverA200: a handler panic reaches the client as a 500 from
// gin's recovery, never as a 200, with the recovery (gin.Default's, a
// custom one) and gzip before the adapter in either order. Before the
// handler wrote, the key is released and the retry runs; after, the
// outcome is unknown and no retry runs it again. Middleware right outside
// the adapter sees a live request context.
func TestPanicNeverA200(t *testing.T) {
	t.Parallel()
	quiet := gin.RecoveryWithWriter(io.Discard)
	custom := gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "custom"})
	})
	for name, outer := range map[string][]gin.HandlerFunc{
		"default":          gin.Default().Handlers,
		"recovery,gzip":    {quiet, gzipMiddleware},
		"gzip,recovery":    {gzipMiddleware, quiet},
		"gzip,custom":      {gzipMiddleware, custom},
		"custom":           {custom},
		"recovery,gzip(2)": {quiet, gzipMiddleware, gzipMiddleware},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url, early, late, dead := panicServer(t, outer, nil)
			a, err := sendGzip(t, url+"/early", "e-1")
			if err != nil || a.status != http.StatusInternalServerError {
				t.Fatalf("panic before writing: %+v %v, want 500", a, err)
			}
			if a, err := sendGzip(t, url+"/early", "e-1"); err != nil || a.status != http.StatusCreated || a.replayed {
				t.Fatalf("retry after a panic before writing: %+v %v, want a new execution", a, err)
			}
			a, err = sendGzip(t, url+"/late", "l-1")
			if err != nil || a.status != http.StatusInternalServerError {
				t.Fatalf("panic after writing: %+v %v, want 500", a, err)
			}
			for range 2 {
				if a, err := sendGzip(t, url+"/late", "l-1"); err != nil || a.status == http.StatusOK {
					t.Fatalf("retry after a panic after writing: %+v %v, want the stored unknown outcome", a, err)
				}
			}
			if early.Load() != 2 || late.Load() != 1 {
				t.Fatalf("runs: early %d (want 2), late %d (want 1)", early.Load(), late.Load())
			}
			if dead.Load() != 0 {
				t.Fatalf("%d times the middleware outside the adapter saw a cancelled context", dead.Load())
			}
		})
	}
}

// TestRecoveryInsideSection: a recovery inside the section turns a panic
// before the first write into the 500 it writes, which (a 5xx) releases
// the key; after the first write it can no longer change the status, and
// the adapter aborts the answer instead of storing a 200: the client's
// connection is cut and every retry gets the unknown outcome.
func TestRecoveryInsideSection(t *testing.T) {
	t.Parallel()
	url, early, late, _ := panicServer(t, nil, []gin.HandlerFunc{gin.RecoveryWithWriter(io.Discard)})
	if a, err := sendGzip(t, url+"/early", "e-1"); err != nil || a.status != http.StatusInternalServerError {
		t.Fatalf("panic before writing: %+v %v, want 500", a, err)
	}
	if a, err := sendGzip(t, url+"/early", "e-1"); err != nil || a.status != http.StatusCreated {
		t.Fatalf("retry: %+v %v, want a new execution", a, err)
	}
	if a, err := sendGzip(t, url+"/late", "l-1"); err == nil {
		t.Fatalf("panic after writing: %+v, want the connection cut", a)
	}
	for range 2 {
		if a, err := sendGzip(t, url+"/late", "l-1"); err != nil || a.status == http.StatusOK {
			t.Fatalf("retry: %+v %v, want the stored unknown outcome", a, err)
		}
	}
	if early.Load() != 2 || late.Load() != 1 {
		t.Fatalf("runs: early %d, late %d", early.Load(), late.Load())
	}
}
