package echoidem_test

import (
	"errors"
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

// TestRecoverInsideSection: a Recover inside the section (route
// middleware after the adapter) turns a panic before the first write into
// the 500 of echo's error handler, which (a 5xx) releases the key; after
// the first write echo's error handler can no longer answer, and the
// adapter aborts the answer instead of storing the partial 200: the
// client's connection is cut and every retry gets the unknown outcome.
// The same holds for a Recover that returns the error instead of handling
// it, for a custom error handler, for a custom context made inside the
// section, and for a handler that returns a server error after writing.
func TestRecoverInsideSection(t *testing.T) {
	t.Parallel()
	custom := func(err error, c echo.Context) {
		if !c.Response().Committed {
			c.JSON(http.StatusInternalServerError, map[string]string{"error": "custom: " + err.Error()})
		}
	}
	type customContext struct{ echo.Context }
	wrapInside := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(&customContext{c}) }
	}
	for name, tc := range map[string]struct {
		outer, inner []echo.MiddlewareFunc
		eh           echo.HTTPErrorHandler
	}{
		"recover":                {nil, []echo.MiddlewareFunc{middleware.Recover()}, nil},
		"recover returning":      {nil, []echo.MiddlewareFunc{middleware.RecoverWithConfig(middleware.RecoverConfig{DisableErrorHandler: true})}, nil},
		"recover,custom":         {nil, []echo.MiddlewareFunc{middleware.Recover()}, custom},
		"gzip,recover":           {nil, []echo.MiddlewareFunc{middleware.Gzip(), middleware.Recover()}, nil},
		"custom context,recover": {nil, []echo.MiddlewareFunc{wrapInside, middleware.Recover()}, nil},
		"both sides":             {[]echo.MiddlewareFunc{middleware.Recover()}, []echo.MiddlewareFunc{middleware.Recover()}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url, early, late, _ := panicServer(t, tc.outer, tc.inner, tc.eh)
			if a, err := send(url+"/early", "e-1"); err != nil || a.status != http.StatusInternalServerError {
				t.Fatalf("panic before writing: %+v %v, want 500", a, err)
			}
			if a, err := send(url+"/early", "e-1"); err != nil || a.status != http.StatusCreated || a.replayed {
				t.Fatalf("retry: %+v %v, want a new execution", a, err)
			}
			if a, err := send(url+"/late", "l-1"); err == nil {
				t.Fatalf("panic after writing: %+v, want the connection cut", a)
			}
			for range 2 {
				if a, err := send(url+"/late", "l-1"); err != nil || a.status == http.StatusOK || a.body == "partial" {
					t.Fatalf("retry: %+v %v, want the stored unknown outcome", a, err)
				}
			}
			if early.Load() != 2 || late.Load() != 1 {
				t.Fatalf("runs: early %d (want 2), late %d (want 1)", early.Load(), late.Load())
			}
		})
	}
}

// TestServerErrorAfterWriting: a handler that writes and then returns a
// server error did not finish: the adapter aborts the answer and the key
// is held as outcome-unknown, as for a panic. A client error after writing
// (a 4xx: nothing was done) leaves the written answer as the outcome.
func TestServerErrorAfterWriting(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	t.Cleanup(func() { store.Close() })
	m, err := httpidem.New(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.Logger.SetOutput(io.Discard)
	var runs atomic.Int64
	e.POST("/fail", func(c echo.Context) error {
		runs.Add(1)
		c.String(http.StatusOK, "partial")
		return errors.New("database went away")
	}, echoidem.Middleware(m))
	e.POST("/refuse", func(c echo.Context) error {
		runs.Add(1)
		c.String(http.StatusOK, "written")
		return echo.NewHTTPError(http.StatusConflict, "late refusal")
	}, echoidem.Middleware(m))
	srv := httptest.NewServer(e)
	t.Cleanup(srv.Close)
	if a, err := send(srv.URL+"/fail", "f-1"); err == nil {
		t.Fatalf("server error after writing: %+v, want the connection cut", a)
	}
	if a, err := send(srv.URL+"/fail", "f-1"); err != nil || a.status == http.StatusOK || a.body == "partial" {
		t.Fatalf("retry: %+v %v, want the stored unknown outcome", a, err)
	}
	if a, err := send(srv.URL+"/refuse", "r-1"); err != nil || a.status != http.StatusOK || a.body != "written" {
		t.Fatalf("client error after writing: %+v %v, want the written 200", a, err)
	}
	if a, err := send(srv.URL+"/refuse", "r-1"); err != nil || !a.replayed || a.body != "written" {
		t.Fatalf("retry: %+v %v, want the written answer replayed", a, err)
	}
	if runs.Load() != 2 {
		t.Fatalf("%d runs, want 2", runs.Load())
	}
}

// TestCustomContextOutsideHidesRecover pins what the package documents for
// a custom context type made by middleware outside the adapter: the
// adapter passes it on unwrapped (handlers assert its type), and a Recover
// inside the section then goes unseen after the first write. Recover
// outside still answers 500 and holds the key; keep it there.
func TestCustomContextOutsideHidesRecover(t *testing.T) {
	t.Parallel()
	type customContext struct{ echo.Context }
	wrap := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error { return next(&customContext{c}) }
	}
	asserting := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if _, ok := c.(*customContext); !ok {
				return echo.NewHTTPError(http.StatusTeapot, "not the custom context")
			}
			return next(c)
		}
	}
	url, _, _, _ := panicServer(t, []echo.MiddlewareFunc{wrap}, []echo.MiddlewareFunc{middleware.Recover(), asserting}, nil)
	if a, err := send(url+"/late", "l-1"); err != nil || a.body != "partial" {
		t.Fatalf("panic after writing: %+v %v, want the handler's partial answer", a, err)
	}
	if a, err := send(url+"/late", "l-1"); err != nil || !a.replayed || a.body != "partial" {
		t.Fatalf("retry: %+v %v, want the stored partial answer (documented limitation)", a, err)
	}
	url, _, late, _ := panicServer(t, []echo.MiddlewareFunc{middleware.Recover(), wrap}, []echo.MiddlewareFunc{asserting}, nil)
	if a, err := send(url+"/late", "l-1"); err != nil || a.status != http.StatusInternalServerError {
		t.Fatalf("panic after writing, Recover outside: %+v %v, want 500", a, err)
	}
	if a, err := send(url+"/late", "l-1"); err != nil || a.status == http.StatusOK || a.body == "partial" {
		t.Fatalf("retry: %+v %v, want the stored unknown outcome", a, err)
	}
	if late.Load() != 1 {
		t.Fatalf("late ran %d times on the second server, want 1", late.Load())
	}
}
