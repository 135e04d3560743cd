package httpidem

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// Middleware is the Idempotency-Key middleware. Build it with New; it is
// safe for concurrent use.
type Middleware struct {
	store   idem.Store
	cfg     Config
	header  string // canonical form of cfg.Header
	methods methodSet
	drop    []string // canonical DropHeaders
	log     *slog.Logger
	obs     observe.Observer // nil: none
	claimer idem.Claimer     // the claim engine, configured once
	// resolver follows held keys up with Config.ResolveFunc (nil: none).
	resolver *resolver
	budget   *MemoryBudget // cfg.Budget, or the process's default
}

// New returns the middleware over store. A nil cfg means the defaults. It
// fails on an invalid Config.
func New(store idem.Store, cfg *Config) (*Middleware, error) {
	if store == nil {
		return nil, &idem.ConfigError{Package: "httpidem", Field: "store", Reason: "nil"}
	}
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	m := &Middleware{
		store:   store,
		cfg:     c,
		header:  textproto.CanonicalMIMEHeaderKey(c.Header),
		methods: newMethodSet(c.Methods),
		obs:     c.Observer,
		log:     c.Logger,
		budget:  c.Budget,
	}
	if m.budget == nil {
		m.budget = defaultBudget
	}
	m.claimer = idem.Claimer{
		Store:        store,
		Observer:     observe.ForAttempts(c.Observer, observe.ProtocolHTTP),
		AtMostOnce:   c.AtMostOnce,
		Wait:         c.WaitTimeout,
		FailOpen:     c.FailOpen,
		StoreTimeout: c.StoreTimeout,
		FinishGrace:  c.StoreTimeout,
	}
	keep := map[string]bool{}
	for _, h := range c.KeepHeaders {
		keep[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	for _, h := range append(c.DropHeaders[:len(c.DropHeaders):len(c.DropHeaders)], defaultDrop...) {
		if h = textproto.CanonicalMIMEHeaderKey(h); !keep[h] && !slices.Contains(m.drop, h) {
			m.drop = append(m.drop, h)
		}
	}
	if c.ResolveFunc != nil && c.UnknownOutcome == HoldUnknown {
		m.resolver = &resolver{fn: c.ResolveFunc, store: store, retain: c.Retention, counted: c.ResolvedFunc,
			log: m.log, drop: m.drop, maxBody: c.MaxResponse, stop: make(chan struct{})}
	}
	return m, nil
}

// defaultDrop are the response headers never stored unless
// Config.KeepHeaders names them.
var defaultDrop = []string{"Set-Cookie"}

// Handler wraps next: m.Handler has the shape func(http.Handler)
// http.Handler of router middleware.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

// readBody reads the whole request body, up to MaxBody. A problem is
// returned for a body over the limit (413) or one that could not be read.
//
// Small bodies are read into a pooled buffer (bufp, nil otherwise); the
// caller returns it with putBody when the body is no longer needed, or
// never, when the body goes to the handler.
func (m *Middleware) readBody(r *http.Request, c *charge) (b []byte, bufp *[]byte, p *problem, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil, nil, nil
	}
	limit := m.cfg.MaxBody
	if r.ContentLength > limit {
		return nil, nil, &probBodyTooLarge, nil
	}
	// The buffer grows with the bytes that arrive: a declared length is
	// trusted only up to a small first allocation, so a client that
	// announces 10 MiB and sends one byte costs 16 KiB, not 10 MiB.
	size := 512
	if r.ContentLength >= 0 {
		size = int(min(r.ContentLength+1, maxBodyPrealloc)) // +1: see EOF without growing
	}
	if !c.take(int64(size)) {
		return nil, nil, c.over, nil
	}
	if size <= pooledBody {
		bufp = reqBufPool.Get().(*[]byte)
		if cap(*bufp) < size {
			*bufp = make([]byte, 0, size)
		}
		b = (*bufp)[:0]
	} else {
		b = make([]byte, 0, size)
	}
	b, p, err = readAll(b, r.Body, limit, c)
	if p == &probBodyUnreadable {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			p, err = &probBodyTooLarge, nil
		}
	}
	return b, bufp, p, err
}

// readAll appends what rd has to b, up to limit bytes, growing b under the
// budget c (b's capacity is charged already). A reader
// with more than limit bytes is probBodyTooLarge.
func readAll(b []byte, rd io.Reader, limit int64, c *charge) ([]byte, *problem, error) {
	lr := io.LimitedReader{R: rd, N: limit + 1} // a value: no allocation
	for {
		if len(b) == cap(b) {
			// Grow by doubling, up to limit+1 (enough to see EOF), and
			// charge the new buffer before allocating it. The old one is
			// garbage from here on and is given back with the request.
			n := int(min(max(2*int64(cap(b)), 512), limit+1))
			if n <= cap(b) {
				n = cap(b) + 1
			}
			if !c.take(int64(n)) {
				return b, c.over, nil
			}
			nb := make([]byte, len(b), n)
			copy(nb, b)
			b = nb
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return b, &probBodyUnreadable, err
		}
	}
	if int64(len(b)) > limit {
		return b, &probBodyTooLarge, nil
	}
	return b, nil, nil
}

// reqBufPool holds request body buffers for bodies that are read to be
// fingerprinted and then not handed to a handler (replays, refusals).
var reqBufPool = sync.Pool{New: func() any { b := make([]byte, 0, pooledBody); return &b }}

const pooledBody = 4 << 10

// putBody returns a pooled body buffer (b grew from *bufp) unless it grew
// past maxPooledBuffer.
func putBody(bufp *[]byte, b []byte) {
	if bufp == nil || cap(b) > maxPooledBuffer {
		return
	}
	*bufp = b[:0]
	reqBufPool.Put(bufp)
}

// maxBodyPrealloc bounds the first allocation of the request body buffer.
const maxBodyPrealloc = 16 << 10

// gzipped reports whether the request body is sent with Content-Encoding
// gzip (and nothing else).
func gzipped(r *http.Request) bool {
	ce := r.Header["Content-Encoding"]
	if len(ce) != 1 {
		return false
	}
	v := strings.TrimSpace(ce[0])
	return strings.EqualFold(v, "gzip") || strings.EqualFold(v, "x-gzip")
}

// gunzip decodes a gzip body for the fingerprint, up to MaxBody decoded
// bytes: a larger one (a zip bomb) is answered 413.
func (m *Middleware) gunzip(body []byte, c *charge) ([]byte, *problem, error) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, &probBodyUnreadable, err
	}
	defer zr.Close()
	size := int(min(int64(4*len(body)), m.cfg.MaxBody+1, maxBodyPrealloc))
	if !c.take(int64(size)) {
		return nil, c.over, nil
	}
	out, p, err := readAll(make([]byte, 0, size), zr, m.cfg.MaxBody, c)
	if p != nil {
		return nil, p, err
	}
	return out, nil, nil
}

// requestFingerprint is the request's fingerprint: over the values that
// Config.FingerprintPointers name in a non-empty body (which must be
// JSON), else as fingerprint computes it.
func (m *Middleware) requestFingerprint(r *http.Request, body []byte) (idem.Fingerprint, error) {
	if len(m.cfg.FingerprintPointers) == 0 || len(body) == 0 {
		return m.fingerprint(r, body), nil
	}
	// The method, path and query go in first, each length-prefixed.
	path := r.URL.EscapedPath()
	prefix := make([]byte, 0, 3*4+len(r.Method)+len(path)+len(r.URL.RawQuery))
	for _, part := range [...]string{r.Method, path, r.URL.RawQuery} {
		prefix = strconv.AppendInt(prefix, int64(len(part)), 10)
		prefix = append(prefix, ':')
		prefix = append(prefix, part...)
	}
	return idem.FingerprintJSONPointers(body, string(prefix), m.cfg.FingerprintPointers...)
}

func (m *Middleware) fingerprint(r *http.Request, body []byte) idem.Fingerprint {
	path := r.URL.EscapedPath()
	if m.cfg.JSONFingerprint {
		if fp, err := idem.RequestFingerprintJSON(r.Method, path, r.URL.RawQuery, body); err == nil {
			return fp
		}
		// Not JSON: fingerprint the bytes as sent. A canonical form is
		// always valid JSON, so it never equals an invalid body.
	}
	return idem.RequestFingerprint(r.Method, path, r.URL.RawQuery, body)
}

// withBody returns a shallow copy of r with ctx whose body replays b, so
// the handler receives the body intact: the same bytes that were
// fingerprinted, not a copy. br, when not nil, is the reader to use (it
// lives in the caller's per-request state, which saves an allocation).
func withBody(ctx context.Context, r *http.Request, b []byte, br *bodyReader) *http.Request {
	r2 := r.WithContext(ctx)
	if len(b) == 0 {
		if r.Body == nil {
			return r2
		}
		r2.Body = http.NoBody
		r2.GetBody = getNoBody
	} else {
		if br == nil {
			br = new(bodyReader)
		}
		br.r.Reset(b)
		r2.Body = br
		r2.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	}
	r2.ContentLength = int64(len(b))
	r2.TransferEncoding = nil
	return r2
}

func getNoBody() (io.ReadCloser, error) { return http.NoBody, nil }

// bodyReader is the request body a protected handler reads: the buffered
// bytes, with the methods io.NopCloser(bytes.NewReader(b)) has (Read,
// WriteTo, Close) and no others.
type bodyReader struct{ r bytes.Reader }

func (b *bodyReader) Read(p []byte) (int, error)         { return b.r.Read(p) }
func (b *bodyReader) WriteTo(w io.Writer) (int64, error) { return b.r.WriteTo(w) }
func (*bodyReader) Close() error                         { return nil }

// writeResponse sends a first response.
func writeResponse(w http.ResponseWriter, resp *storedResponse) {
	if !resp.inW {
		h := w.Header()
		for k, vs := range resp.Header {
			h[k] = vs
		}
	}
	sendResponse(w, resp)
}

// writeFirst sends a first response with the handler's trailers, if any:
// declared, after the body, never in the header block. (Without a
// Content-Length, net/http sends them in the chunked encoding.)
func writeFirst(w http.ResponseWriter, resp *storedResponse, trailers http.Header) {
	if len(trailers) == 0 {
		writeResponse(w, resp)
		return
	}
	h := w.Header()
	if resp.inW {
		delete(h, "Content-Length")
	} else {
		for k, vs := range resp.Header {
			if k != "Content-Length" {
				h[k] = vs
			}
		}
	}
	names := make([]string, 0, len(trailers))
	for k := range trailers {
		names = append(names, k)
	}
	slices.Sort(names)
	h["Trailer"] = []string{strings.Join(names, ", ")}
	sendResponse(w, resp)
	for k, vs := range trailers {
		h[k] = vs
	}
}

// sendResponse sends resp's status and body; its headers are already in
// w's.
func sendResponse(w http.ResponseWriter, resp *storedResponse) {
	w.WriteHeader(resp.Status)
	if len(resp.Body) > 0 {
		_, _ = w.Write(resp.Body)
	}
}

var replayedTrue = []string{"true"}

// dropsAny reports whether h has a header that is not stored.
func (m *Middleware) dropsAny(h http.Header) bool {
	for _, d := range m.drop {
		if _, ok := h[d]; ok {
			return true
		}
	}
	return false
}

var errStreamed = errors.New("response streamed, stored as not replayable")

// decided is decidedStatus for a request the middleware did not answer
// itself.
func (m *Middleware) decided(r *http.Request, key idem.Key, o outcome, err error) {
	m.decidedStatus(r, key, o, 0, err)
}

// decidedStatus reports the decision to the observer and logs it: the
// hashed key, never the raw one. status is what the client was sent.
func (m *Middleware) decidedStatus(r *http.Request, key idem.Key, o outcome, status int, err error) {
	m.notify(r, key, o, status, err)
	level := slog.LevelInfo
	switch o {
	case outcomeExecuted, outcomeReplayed, outcomeKeyless, outcomeReleased, outcomeCanceled, outcomeSkipped:
		level = slog.LevelDebug
	case outcomeStoreError, outcomeFailOpen, outcomeUnknown:
		level = slog.LevelWarn
	}
	ctx := r.Context()
	if !m.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs, slog.String("outcome", o.String()))
	if !key.IsZero() {
		attrs = append(attrs, slog.String("key", key.String()))
	}
	attrs = append(attrs, slog.String("method", r.Method), slog.String("path", r.URL.Path))
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	m.log.LogAttrs(ctx, level, "idempotency decision", attrs...)
}
