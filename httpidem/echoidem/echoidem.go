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
			outer := c.Response()
			m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err := next(c); err != nil {
					c.Error(err) // echo's HTTPErrorHandler writes the error answer inside the section
				}
			})).ServeHTTP(outer, c.Request())
			c.SetResponse(outer)
			return nil
		}
	}
}
