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
// # Recovery and compression
//
// Register recovery (gin.Default's gin.Recovery, gin.CustomRecovery) and
// compression before the adapter, outside the idempotent section:
//
//	r := gin.Default()          // Logger and Recovery, outside
//	r.Use(gzipMiddleware)       // outside too: stored answers are not compressed
//	r.POST("/charges", ginidem.Middleware(m), createCharge)
//
// A handler panic then passes through the section (which releases the key
// if nothing was written yet, and records the outcome as unknown if the
// answer had started) to the recovery, which answers 500 on gin's own
// writer: the adapter puts gin's writer and the original request (with a
// live context) back on every path, panics included, so the client never
// gets an empty 200. Compression outside means the stored answer is the
// identity form, compressed anew for each client that asks for it, so a
// retry that did not ask for gzip never gets a gzip body.
//
// A recovery inside the section (after the adapter) turns a panic into an
// ordinary answer. Before the first write that is its 500, and a 5xx
// releases the key, so the retry runs again. After the first write the
// status can no longer change; the adapter sees the recovery's attempt to
// set a 5xx and aborts the answer (http.ErrAbortHandler) instead of
// storing the partial 200: the client's connection is cut, and every retry
// gets the stored outcome-unknown answer. Compression inside the section
// stores the compressed bytes with their Content-Encoding, which every
// replay sends whatever the retry's Accept-Encoding says.
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
		outer, req := c.Writer, c.Request
		// On every path, a panic included: middleware outside the
		// section (gin's Recovery, a logger) writes to gin's own writer,
		// which reaches the client, and sees the request as it came, with
		// a live context. Left in place, the section's writer would take
		// the recovery's 500 into a recorder nobody reads, and gin would
		// answer an empty 200.
		defer func() {
			c.Writer, c.Request = outer, req
		}()
		m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c.Request = r
			iw := newWriter(w, r)
			c.Writer = iw
			c.Next()
			if iw.lateError {
				// A server error after the answer had started (a
				// recovery inside the section, after the handler wrote
				// and panicked): what was written is not the outcome.
				// Aborting makes it unknown, never a stored 200.
				panic(http.ErrAbortHandler)
			}
			c.Writer.WriteHeaderNow() // a status without a body is an answer too
		})).ServeHTTP(outer, req)
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
	// lateError: a 5xx status was set after the header was written.
	lateError bool

	closeOnce sync.Once
	closed    chan bool
}

var _ gin.ResponseWriter = (*writer)(nil)

func newWriter(w http.ResponseWriter, r *http.Request) *writer {
	return &writer{ResponseWriter: w, r: r, status: http.StatusOK, size: noWritten}
}

func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *writer) WriteHeader(code int) {
	if code > 0 && w.status != code {
		if !w.Written() {
			w.status = code
		} else if code >= 500 {
			w.lateError = true
		}
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
