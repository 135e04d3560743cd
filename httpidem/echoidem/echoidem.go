// Package echoidem puts idem's Idempotency-Key middleware (httpidem) into an
// echo server so that it stores the answer echo really sends, including the
// errors handlers return.
//
//	m, err := httpidem.New(store, &httpidem.Config{…})
//	e := echo.New()
//	e.POST("/charges", createCharge, echoidem.Middleware(m))
//
// Echo turns a returned error into a response in its HTTPErrorHandler,
// after the middleware chain has returned. With echo.WrapMiddleware(m.Handler)
// the idempotent section ends before that happens: a handler that returns
// echo.NewHTTPError(402, …) gives the client an empty 200, and every retry
// replays it. Middleware calls the error handler inside the section
// (c.Error), so the 402 is what is stored and replayed, and a 5xx (by
// default) releases the key so that the retry runs again. The error is then
// handled; Middleware returns nil, and middleware outside it sees the status
// in c.Response().Status. The semantics are httpidem's; see docs/http.md.
//
// # Recovery and compression
//
// Register middleware.Recover and middleware.Gzip with e.Use, before the
// adapter, outside the idempotent section:
//
//	e.Use(middleware.Recover(), middleware.Gzip())
//	e.POST("/charges", createCharge, echoidem.Middleware(m))
//
// A handler panic then passes through the section (which releases the key
// if nothing was written yet, and records the outcome as unknown if the
// answer had started) to Recover, which answers 500 through echo's error
// handler on echo's own response: the adapter puts that response and the
// original request (with a live context) back on every path, panics
// included, so the client never gets an empty 200. Compression outside
// means the stored answer is the identity form, compressed anew for each
// client that asks for it.
//
// A Recover inside the section (route middleware after the adapter) turns
// a panic into an ordinary answer: before the first write, the 500 of
// echo's error handler, which (a 5xx) releases the key so the retry runs
// again; after the first write, echo's error handler writes nothing (the
// response is committed), so the partial answer the handler wrote is
// stored and replayed as if it were complete. Keep Recover outside. Gzip
// inside the section stores the compressed bytes with their
// Content-Encoding, which every replay sends whatever the retry's
// Accept-Encoding says.
package echoidem

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/httpidem"
)

// Middleware returns echo middleware that runs the rest of the chain, and
// echo's handling of its error, under m.
func Middleware(m *httpidem.Middleware) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			outer, req := c.Response(), c.Request()
			// On every path, a panic included: middleware outside the
			// section (middleware.Recover, a logger) writes to echo's own
			// response, which reaches the client, and sees the request as
			// it came, with a live context. Left in place, the section's
			// response would take the recovery's 500 into a recorder
			// nobody reads, and the client would get an empty 200.
			defer func() {
				c.SetResponse(outer)
				c.SetRequest(req)
			}()
			m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err) // echo's HTTPErrorHandler writes the error answer inside the section
				}
			})).ServeHTTP(outer, req)
			return nil
		}
	}
}
