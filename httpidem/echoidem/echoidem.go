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
// a panic into an ordinary answer. Before the first write that is the 500
// of echo's error handler, and a 5xx releases the key, so the retry runs
// again. After the first write echo's error handler can no longer answer
// (the response is committed); the adapter, which hands the rest of the
// chain a context that sees every error given to echo's error handler
// (c.Error, which Recover calls), notes the server error and aborts the
// answer (http.ErrAbortHandler) instead of storing the partial one: the
// client's connection is cut, and every retry gets the stored
// outcome-unknown answer. The same holds when the handler itself writes
// and then returns an error that echo answers with a 5xx, and for a
// Recover that returns the error (RecoverConfig.DisableErrorHandler).
//
// One case stays unseen: a custom context type made by middleware outside
// the adapter (the pattern of echo's "custom context" guide, registered
// with e.Use) is passed on as it is, since handlers assert its type; the
// c.Error that a Recover inside calls then goes straight to echo's error
// handler, past the adapter (an error returned to the adapter is still
// seen). With such a context, keep Recover outside the adapter. A custom context made inside the
// section (route middleware after the adapter) wraps the adapter's and
// keeps the detection.
//
// Gzip inside the section stores the compressed bytes with their
// Content-Encoding, which every replay sends whatever the retry's
// Accept-Encoding says.
package echoidem

import (
	"net/http"
	"reflect"
	"sync"

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
				sc := &section{Context: c}
				inner := echo.Context(sc)
				if !isEchoContext(c) {
					// A custom context type made outside the adapter:
					// wrapped, the handler's c.(*CustomContext) would
					// fail. Passed as it is, a Recover inside the
					// section goes unseen (see the package doc).
					inner = c
				}
				if err := next(inner); err != nil {
					sc.Error(err) // echo's HTTPErrorHandler writes the error answer inside the section
				}
				if sc.late {
					// A server error after the answer had started (a
					// Recover inside the section, after the handler
					// wrote and panicked): what was written is not the
					// outcome. Aborting makes it unknown, never a stored
					// success.
					panic(http.ErrAbortHandler)
				}
			})).ServeHTTP(outer, req)
			return nil
		}
	}
}

// section is the context the rest of the chain gets inside the idempotent
// section. It sees every error handed to echo's error handler (c.Error,
// which middleware.Recover calls with a recovered panic) and notes a
// server error that arrives after the answer started: echo's error
// handler writes nothing on a committed response, so without the note the
// partial answer would be stored as the outcome.
type section struct {
	echo.Context
	late bool
}

// Error implements echo.Context.
func (c *section) Error(err error) {
	if c.Response().Committed && serverError(err) {
		c.late = true
	}
	c.Context.Error(err)
}

// serverError reports whether echo's default error handler answers err
// with a 5xx: an *echo.HTTPError with such a code (or an inner one, as the
// handler unwraps it), or any other error (500).
func serverError(err error) bool {
	he, ok := err.(*echo.HTTPError)
	if !ok {
		return err != nil
	}
	if inner, ok := he.Internal.(*echo.HTTPError); ok {
		he = inner
	}
	return he.Code >= http.StatusInternalServerError
}

// echoContextType is the type of echo's own Context implementation.
var echoContextType = sync.OnceValue(func() reflect.Type {
	return reflect.TypeOf(echo.New().NewContext(nil, nil))
})

// isEchoContext reports whether c is echo's own Context, not a custom type
// that middleware outside the adapter wrapped it in.
func isEchoContext(c echo.Context) bool { return reflect.TypeOf(c) == echoContextType() }
