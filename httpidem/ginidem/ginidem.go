// Package ginidem puts idem's Idempotency-Key middleware (httpidem) into a
// gin engine so that it sees the response gin really writes: the handlers'
// output, c.AbortWithStatusJSON, c.String and the like, and what later
// middleware adds.
//
//	m, err := httpidem.New(store, &httpidem.Config{…})
//	r := gin.New()
//	r.POST("/charges", ginidem.Middleware(m), createCharge)
//
// Everything after the middleware in the chain runs inside the idempotent
// section: a retry of a completed key gets the stored answer and the chain
// does not run; a keyed duplicate while the first runs gets 409; a 5xx (by
// default) releases the key so that the retry runs again. The semantics are
// httpidem's; see docs/http.md.
//
// Wrapping the handler with gin.WrapH(m.Handler(…)) would work too, but
// middleware registered before it (logging, recovery) would then see gin's
// own writer, not the stored answer; Middleware keeps gin's chain intact.
package ginidem

import (
	"bufio"
	"net"
	"net/http"
	"sync"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem/httpidem"
)

// Middleware returns gin middleware that runs the rest of the chain under
// m.
func Middleware(m *httpidem.Middleware) gin.HandlerFunc {
	return func(c *gin.Context) {
		outer := c.Writer
		m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Request = r
			c.Writer = newWriter(w, r)
			c.Next()
			c.Writer.WriteHeaderNow() // a status without a body is an answer too
		})).ServeHTTP(outer, c.Request)
		c.Writer = outer
		c.Abort() // a replay or a refusal: the rest of the chain must not run
	}
}

const noWritten = -1

// writer is a gin.ResponseWriter over the writer httpidem hands the
// handler: like gin's own, it holds the status back until the first byte or
// WriteHeaderNow.
type writer struct {
	http.ResponseWriter
	r      *http.Request
	status int
	size   int

	closeOnce sync.Once
	closed    chan bool
}

var _ gin.ResponseWriter = (*writer)(nil)

func newWriter(w http.ResponseWriter, r *http.Request) *writer {
	return &writer{ResponseWriter: w, r: r, status: http.StatusOK, size: noWritten}
}

func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *writer) WriteHeader(code int) {
	if code > 0 && w.status != code && !w.Written() {
		w.status = code
	}
}

func (w *writer) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.ResponseWriter.WriteHeader(w.status)
	}
}

func (w *writer) Write(b []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write(b)
	w.size += n
	return n, err
}

func (w *writer) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write([]byte(s))
	w.size += n
	return n, err
}

func (w *writer) Status() int   { return w.status }
func (w *writer) Size() int     { return w.size }
func (w *writer) Written() bool { return w.size != noWritten }

// Hijack is refused by httpidem for protected requests (a hijacked
// connection has no answer to store); it is passed on so the error says so.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if w.size < 0 {
		w.size = 0
	}
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Flush is held back by httpidem until the answer is stored.
func (w *writer) Flush() {
	w.WriteHeaderNow()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// CloseNotify reports the client going away, from the request's context.
//
// Deprecated: use the request's context, as http.CloseNotifier says.
func (w *writer) CloseNotify() <-chan bool {
	w.closeOnce.Do(func() {
		w.closed = make(chan bool, 1)
		ctx := w.r.Context()
		go func() {
			<-ctx.Done()
			w.closed <- true
		}()
	})
	return w.closed
}

// Pusher returns nil: a pushed stream could not be replayed.
func (w *writer) Pusher() http.Pusher { return nil }
