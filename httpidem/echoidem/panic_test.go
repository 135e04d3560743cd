package echoidem_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/httpidem/echoidem"
	"github.com/idemkit/idem/memstore"
)

// panicServer serves /early (panics before writing on its first run, then
// answers 201) and /late (writes 200 and then panics) behind e.Use(outer...)
// with the route middleware echoidem, inner....
func panicServer(t *testing.T, outer, inner []echo.MiddlewareFunc, errorHandler echo.HTTPErrorHandler) (url string, early, late, deadCtx *atomic.Int64) {
	t.Helper()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	m, err := httpidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	early, late, deadCtx = new(atomic.Int64), new(atomic.Int64), new(atomic.Int64)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	if errorHandler != nil {
		e.HTTPErrorHandler = errorHandler
	}
	e.Use(outer...)
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // right outside the adapter
		return func(c echo.Context) error {
			defer func() {
				if c.Request().Context().Err() != nil {
					deadCtx.Add(1)
				}
			}()
			return next(c)
		}
	})
	route := append([]echo.MiddlewareFunc{echoidem.Middleware(m)}, inner...)
	e.POST("/early", func(c echo.Context) error {
		if early.Add(1) == 1 {
			panic("handler bug")
		}
		return c.String(http.StatusCreated, "created")
	}, route...)
	e.POST("/late", func(c echo.Context) error {
		late.Add(1)
		c.String(http.StatusOK, "partial")
		panic("handler bug after writing")
	}, route...)
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	return srv.URL, early, late, deadCtx
}

// fresh sends each request on a new connection (http.Transport resends a
// keyed request whose reused connection was cut).
var fresh = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

func send(url, key string) (answer, error) {
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

// TestPanicNeverA200: a handler panic reaches the client as the 500 of
// echo's Recover, never as a 200, with Recover and Gzip before the adapter
// in either order and with a custom error handler. Before the handler
// wrote, the key is released and the retry runs; after, the outcome is
// unknown and no retry runs it again. Middleware right outside the adapter
// sees a live request context.
func TestPanicNeverA200(t *testing.T) {
	t.Parallel()
	custom := func(err error, c echo.Context) {
		if !c.Response().Committed {
			c.JSON(http.StatusInternalServerError, map[string]string{"error": "custom: " + err.Error()})
		}
	}
	for name, tc := range map[string]struct {
		outer []echo.MiddlewareFunc
		eh    echo.HTTPErrorHandler
	}{
		"recover":             {[]echo.MiddlewareFunc{middleware.Recover()}, nil},
		"recover,gzip":        {[]echo.MiddlewareFunc{middleware.Recover(), middleware.Gzip()}, nil},
		"gzip,recover":        {[]echo.MiddlewareFunc{middleware.Gzip(), middleware.Recover()}, nil},
		"recover,custom":      {[]echo.MiddlewareFunc{middleware.Recover()}, custom},
		"gzip,recover,custom": {[]echo.MiddlewareFunc{middleware.Gzip(), middleware.Recover()}, custom},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url, early, late, dead := panicServer(t, tc.outer, nil, tc.eh)
			if a, err := send(url+"/early", "e-1"); err != nil || a.status != http.StatusInternalServerError {
				t.Fatalf("panic before writing: %+v %v, want 500", a, err)
			}
			if a, err := send(url+"/early", "e-1"); err != nil || a.status != http.StatusCreated || a.replayed {
				t.Fatalf("retry after a panic before writing: %+v %v, want a new execution", a, err)
			}
			if a, err := send(url+"/late", "l-1"); err != nil || a.status != http.StatusInternalServerError {
				t.Fatalf("panic after writing: %+v %v, want 500", a, err)
			}
			for range 2 {
				if a, err := send(url+"/late", "l-1"); err != nil || a.status == http.StatusOK {
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

// TestRecoverInsideSection pins what the package documents for Recover
// inside the section: before the first write, its 500 releases the key
// and the retry runs; after the first write, echo's error handler writes
// nothing, and the partial answer is what is stored and replayed.
func TestRecoverInsideSection(t *testing.T) {
	t.Parallel()
	url, early, late, _ := panicServer(t, nil, []echo.MiddlewareFunc{middleware.Recover()}, nil)
	if a, err := send(url+"/early", "e-1"); err != nil || a.status != http.StatusInternalServerError {
		t.Fatalf("panic before writing: %+v %v, want 500", a, err)
	}
	if a, err := send(url+"/early", "e-1"); err != nil || a.status != http.StatusCreated {
		t.Fatalf("retry: %+v %v, want a new execution", a, err)
	}
	first, err := send(url+"/late", "l-1")
	if err != nil || first.body != "partial" {
		t.Fatalf("panic after writing: %+v %v", first, err)
	}
	if a, err := send(url+"/late", "l-1"); err != nil || !a.replayed || a.body != "partial" {
		t.Fatalf("retry: %+v %v, want the stored partial answer", a, err)
	}
	if early.Load() != 2 || late.Load() != 1 {
		t.Fatalf("runs: early %d, late %d", early.Load(), late.Load())
	}
}
