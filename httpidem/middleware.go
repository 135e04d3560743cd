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
	"time"

	"github.com/idemkit/idem"
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
	obs     Observer      // nil: none
	phases  PhaseObserver // obs, if it is one
}

// New returns the middleware over store. A nil cfg means the defaults. It
// fails on an invalid Config.
func New(store idem.Store, cfg *Config) (*Middleware, error) {
	if store == nil {
		return nil, &idem.ConfigError{Field: "httpidem store", Reason: "must not be nil"}
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
	}
	m.phases, _ = c.Observer.(PhaseObserver)
	keep := map[string]bool{}
	for _, h := range c.KeepHeaders {
		keep[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	for _, h := range append(c.DropHeaders[:len(c.DropHeaders):len(c.DropHeaders)], defaultDrop...) {
		if h = textproto.CanonicalMIMEHeaderKey(h); !keep[h] && !slices.Contains(m.drop, h) {
			m.drop = append(m.drop, h)
		}
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

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if !m.methods.has(r.Method) {
		next.ServeHTTP(w, r)
		return
	}
	if m.cfg.SkipFunc != nil && m.cfg.SkipFunc(r) {
		m.decided(r, idem.Key{}, outcomeSkipped, nil)
		next.ServeHTTP(w, r)
		return
	}
	lines := r.Header[m.header]
	switch len(lines) {
	case 0:
		if m.cfg.KeyPointer != "" {
			m.serveBodyKey(w, r, next)
			return
		}
		if m.cfg.RequireKey {
			m.refuse(w, r, idem.Key{}, probMissingKey, "send an "+m.cfg.Header+" header", 0, 0, nil)
			return
		}
		m.decided(r, idem.Key{}, outcomeKeyless, nil)
		next.ServeHTTP(w, r)
		return
	case 1:
	default:
		m.refuse(w, r, idem.Key{}, probMultipleKeys, "send exactly one "+m.cfg.Header+" header line", 0, 0, nil)
		return
	}
	id, err := ParseKey(lines[0])
	if err != nil {
		m.refuse(w, r, idem.Key{}, probInvalidKey, err.Error(), 0, 0, nil)
		return
	}
	scope, ok := m.scope(w, r)
	if !ok {
		return
	}
	key, ok := m.newKey(w, r, scope, id)
	if !ok || !m.upgradeless(w, r, key) {
		return
	}
	body, fpBody, bufp, ok := m.requestBody(w, r, key)
	if !ok {
		return
	}
	m.protect(w, r, next, key, body, fpBody, bufp)
}

// serveBodyKey serves a protected request without the key header when the
// key is read from the body (Config.KeyPointer). A body that carries no key
// (not JSON, or nothing at the pointer) is a request without a key:
// RequireKey decides, as it does for a request without the header. A value
// at the pointer that is not a valid key is always refused: the client
// meant to send one. So is a body that is not valid JSON (a duplicate
// member, trailing bytes, invalid UTF-8, nesting too deep) but has a value
// at the pointer when read leniently (see bodyNamesKey).
func (m *Middleware) serveBodyKey(w http.ResponseWriter, r *http.Request, next http.Handler) {
	body, fpBody, bufp, ok := m.requestBody(w, r, idem.Key{})
	if !ok {
		return
	}
	id, err := idem.KeyFromJSON("", fpBody, m.cfg.KeyPointer)
	if err != nil {
		noKey := errors.Is(err, idem.ErrInvalidJSON) || errors.Is(err, idem.ErrKeyNotFound)
		if errors.Is(err, idem.ErrInvalidJSON) && bodyNamesKey(fpBody, m.cfg.KeyPointer) {
			// A key the body cannot be fingerprinted around binds all
			// the same: refused, never run unprotected.
			putBody(bufp, body)
			m.refuse(w, r, idem.Key{}, probBodyNotJSON, "the body carries a key at "+m.cfg.KeyPointer+" but is not exactly one valid JSON value in UTF-8", 0, 0, err)
			return
		}
		if noKey && !m.cfg.RequireKey {
			// The handler gets the body; its buffer is never pooled
			// again (see protect).
			m.decided(r, idem.Key{}, outcomeKeyless, nil)
			next.ServeHTTP(w, withBody(r.Context(), r, body, nil))
			return
		}
		putBody(bufp, body)
		switch {
		case errors.Is(err, idem.ErrInvalidJSON):
			m.refuse(w, r, idem.Key{}, probBodyNotJSON, "send an "+m.cfg.Header+" header, or a JSON body with the key at "+m.cfg.KeyPointer, 0, 0, err)
		case errors.Is(err, idem.ErrKeyNotFound):
			m.refuse(w, r, idem.Key{}, probMissingKey, "send an "+m.cfg.Header+" header, or the key at "+m.cfg.KeyPointer+" in the JSON body", 0, 0, nil)
		default:
			m.refuse(w, r, idem.Key{}, probInvalidKey, err.Error(), 0, 0, nil)
		}
		return
	}
	scope, ok := m.scope(w, r)
	if !ok {
		putBody(bufp, body)
		return
	}
	key, ok := m.newKey(w, r, scope, id.ID())
	if !ok || !m.upgradeless(w, r, key) {
		putBody(bufp, body)
		return
	}
	m.protect(w, r, next, key, body, fpBody, bufp)
}

// requestBody reads the request body (see readBody) and, for gzip, decodes
// it for the fingerprint (fpBody; body otherwise). It reports false when
// it refused the request.
func (m *Middleware) requestBody(w http.ResponseWriter, r *http.Request, key idem.Key) (body, fpBody []byte, bufp *[]byte, ok bool) {
	body, bufp, p, err := m.readBody(r)
	if p != nil {
		putBody(bufp, body)
		m.refuse(w, r, key, *p, "", 0, 0, err)
		return nil, nil, nil, false
	}
	fpBody = body
	if len(body) > 0 && gzipped(r) {
		// Fingerprinted on what it says, not on how it was compressed;
		// the handler gets the bytes as sent.
		if fpBody, p, err = m.gunzip(body); p != nil {
			putBody(bufp, body)
			m.refuse(w, r, key, *p, "", 0, 0, err)
			return nil, nil, nil, false
		}
	}
	return body, fpBody, bufp, true
}

// scope is the request's scope, or false when it was refused.
func (m *Middleware) scope(w http.ResponseWriter, r *http.Request) (string, bool) {
	scope, err := m.cfg.ScopeFunc(r)
	switch {
	case errors.Is(err, ErrScopeRequired) || (err == nil && scope == "" && !m.cfg.SharedAnonymousScope):
		m.refuse(w, r, idem.Key{}, probScopeRequired, "send the request with the caller's credentials", 0, 0, nil)
		return "", false
	case err != nil:
		m.refuse(w, r, idem.Key{}, probScope, "", 0, 0, err)
		return "", false
	}
	return scope, true
}

// newKey is the key of a validated id in scope, or false when it was
// refused.
func (m *Middleware) newKey(w http.ResponseWriter, r *http.Request, scope, id string) (idem.Key, bool) {
	key, err := idem.NewKey(scope, id)
	if err != nil { // the id was validated: the scope is too long
		m.refuse(w, r, idem.Key{}, probScope, "", 0, 0, err)
		return idem.Key{}, false
	}
	return key, true
}

// upgradeless refuses a keyed request that asks for an Upgrade: the
// upgraded connection would have no response to store, so it is refused
// before anything reaches the handler.
func (m *Middleware) upgradeless(w http.ResponseWriter, r *http.Request, key idem.Key) bool {
	if len(r.Header["Upgrade"]) > 0 {
		m.refuse(w, r, key, probUpgrade, "send the request without Upgrade, or without "+m.cfg.Header, 0, 0, nil)
		return false
	}
	return true
}

// protect fingerprints a keyed request whose body is read (fpBody is body
// decoded, for gzip) and claims, executes, replays or refuses it.
func (m *Middleware) protect(w http.ResponseWriter, r *http.Request, next http.Handler, key idem.Key, body, fpBody []byte, bufp *[]byte) {
	fp, err := m.requestFingerprint(r, fpBody)
	if err != nil {
		putBody(bufp, body)
		m.refuse(w, r, key, probBodyNotJSON, "the body must be JSON: the fingerprint covers values in it", 0, 0, err)
		return
	}

	dctx, dend := m.phase(r.Context(), PhaseDecide, key)
	claim, sent, err := m.begin(dctx, idem.BeginRequest{Key: key, Fingerprint: fp, Lease: m.cfg.Lease, Retention: m.cfg.Retention})
	if dend != nil {
		dend(m.decideEnd(dctx, claim, err))
	}
	if err != nil {
		switch {
		case m.cfg.FailOpen && idem.IsUnavailable(err):
			m.decided(r, key, outcomeFailOpen, err)
			next.ServeHTTP(w, withBody(r.Context(), r, body, nil))
		default:
			putBody(bufp, body)
			m.refuse(w, r, key, probStoreUnavailable, "", m.cfg.StoreRetryAfter, 0, err)
		}
		return
	}
	if claim.Outcome == idem.Acquired {
		// The handler gets the body; it is never pooled again (a
		// transport may still read it after the handler returned). Its
		// holder goes back, empty.
		if bufp != nil {
			*bufp = nil
			reqBufPool.Put(bufp)
		}
		m.notify(r, key, DecisionAcquired, 0, nil)
		m.execute(w, r, next, key, claim, sent, body)
		return
	}
	putBody(bufp, body)
	switch claim.Outcome {
	case idem.Replay:
		m.replay(w, r, key, claim.Result)
	case idem.Mismatch:
		m.refuse(w, r, key, probMismatch, "this key was used for a request with another method, path, query or body", 0, 0, nil)
	case idem.InFlight:
		m.refuse(w, r, key, probInFlight, "retry with the same key after Retry-After seconds", min(claim.RetryAfter, m.cfg.InFlightRetryAfter), 0, nil)
	default:
		m.refuse(w, r, key, probStoreUnavailable, "", m.cfg.StoreRetryAfter, 0, errors.New("httpidem: store returned an invalid outcome"))
	}
}

// readBody reads the whole request body, up to MaxBody. A problem is
// returned for a body over the limit (413) or one that could not be read.
//
// Small bodies are read into a pooled buffer (bufp, nil otherwise); the
// caller returns it with putBody when the body is no longer needed, or
// never, when the body goes to the handler.
func (m *Middleware) readBody(r *http.Request) (b []byte, bufp *[]byte, p *problem, err error) {
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
	if size <= pooledBody {
		bufp = reqBufPool.Get().(*[]byte)
		if cap(*bufp) < size {
			*bufp = make([]byte, 0, size)
		}
		b = (*bufp)[:0]
	} else {
		b = make([]byte, 0, size)
	}
	lr := io.LimitedReader{R: r.Body, N: limit + 1} // a value: no allocation
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := lr.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return b, bufp, &probBodyTooLarge, nil
			}
			return b, bufp, &probBodyUnreadable, err
		}
	}
	if int64(len(b)) > limit {
		return b, bufp, &probBodyTooLarge, nil
	}
	return b, bufp, nil, nil
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
func (m *Middleware) gunzip(body []byte) ([]byte, *problem, error) {
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		return nil, &probBodyUnreadable, err
	}
	defer zr.Close()
	var out bytes.Buffer
	out.Grow(int(min(int64(4*len(body)), m.cfg.MaxBody+1, maxBodyPrealloc)))
	n, err := out.ReadFrom(io.LimitReader(zr, m.cfg.MaxBody+1))
	if err != nil {
		return nil, &probBodyUnreadable, err
	}
	if n > m.cfg.MaxBody {
		return nil, &probBodyTooLarge, nil
	}
	return out.Bytes(), nil, nil
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

// begin calls Store.Begin, and in wait mode keeps asking while the first
// request runs, up to WaitTimeout.
func (m *Middleware) begin(ctx context.Context, req idem.BeginRequest) (idem.Claim, time.Time, error) {
	t0 := time.Now()
	claim, err := m.store.Begin(ctx, req)
	m.storeCall(ctx, OpBegin, t0, err)
	if err != nil || claim.Outcome != idem.InFlight || m.cfg.WaitTimeout <= 0 {
		return claim, t0, err
	}
	deadline := t0.Add(m.cfg.WaitTimeout)
	poll := 25 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return claim, t0, nil // still in flight: 409
		}
		t := time.NewTimer(min(poll, left, max(claim.RetryAfter, time.Millisecond)))
		select {
		case <-ctx.Done():
			t.Stop()
			return idem.Claim{}, t0, ctx.Err()
		case <-t.C:
		}
		t0 = time.Now()
		c, err := m.store.Begin(ctx, req)
		m.storeCall(ctx, OpBegin, t0, err)
		if err != nil {
			return c, t0, err
		}
		if claim = c; claim.Outcome != idem.InFlight {
			return claim, t0, nil
		}
		poll = min(2*poll, 500*time.Millisecond)
	}
}

func (m *Middleware) replay(w http.ResponseWriter, r *http.Request, key idem.Key, data []byte) {
	// A replayable record's headers are decoded straight into w's.
	// data is the store's answer to this request, owned by it and never
	// changed: the decoded strings may alias it.
	resp, err := decodeResponseAlias(data, w.Header())
	if err != nil {
		m.refuse(w, r, key, probRecordUnreadable, "", 0, 0, err)
		return
	}
	if resp.NotReplayable {
		m.refuse(w, r, key, probNotReplayable, "the operation completed, but its response was streamed or too large to store; it will not run again", 0, resp.Status, nil)
		return
	}
	if ok, detail := m.replayable(r, w.Header(), &resp); !ok {
		clear(w.Header())
		m.refuse(w, r, key, probEncodingNotAccepted, detail, 0, 0, nil)
		return
	}
	// The stored headers are in place; a replay carries
	// Idempotent-Replayed: true.
	w.Header()[ReplayedHeader] = replayedTrue
	sendResponse(w, &resp)
	m.decidedStatus(r, key, outcomeReplayed, resp.Status, nil)
}

// writeResponse sends a first response.
func writeResponse(w http.ResponseWriter, resp *storedResponse) {
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = vs
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
	for k, vs := range resp.Header {
		if k != "Content-Length" {
			h[k] = vs
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

// execute runs next as the owner of key and stores what it answers.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, next http.Handler, key idem.Key, claim idem.Claim, sent time.Time, body []byte) {
	owner := claim.Owner
	// The lease runs from before Begin was sent (or, with AtMostOnce, the
	// mark, which proves the claim held then).
	leaseFrom := sent
	// Complete and Release run on a context the client cannot cancel: a
	// client that went away must find its result stored when it retries.
	finish := context.WithoutCancel(r.Context())
	if m.cfg.AtMostOnce && claim.Started {
		// A previous holder started this request and lost its claim
		// without a result: it may have had its effects. Never again.
		cr, cfinish, cend := m.completing(r, key, finish)
		m.settleUnknown(cfinish, w, cr, key, owner, idem.ErrOutcomeUnknown)
		endPhase(cend, PhaseEnd{})
		return
	}
	wctx, wend := m.phase(r.Context(), PhaseWork, key)
	if m.phases != nil {
		finish = context.WithoutCancel(wctx) // the phase's store calls
	}
	if m.cfg.AtMostOnce {
		t0 := time.Now()
		err := m.store.MarkStarted(finish, owner)
		leaseFrom = t0
		m.storeCall(finish, OpMarkStarted, t0, err)
		if err != nil {
			// Nothing ran: give the claim up so the retry can.
			endPhase(wend, PhaseEnd{Err: err})
			cr, cfinish, cend := m.completing(r, key, finish)
			m.release(cfinish, owner)
			m.refuse(w, cr, key, probStoreUnavailable, "", m.cfg.StoreRetryAfter, 0, err)
			endPhase(cend, PhaseEnd{})
			return
		}
	}
	// The handler sees the client's cancellation, as usual, and also a lost
	// lease (another owner took over): its result can no longer be stored.
	hctx := idem.WithOwner(wctx, owner)
	if claim.Takeover {
		hctx = context.WithValue(hctx, reexecKey{}, true)
	}
	ctx, cancel := context.WithCancelCause(hctx)
	rec := &recorder{m: m, w: w, method: r.Method, header: make(http.Header), owner: owner, finish: finish}
	// The renewals run on the detached context too: a handler that keeps
	// working after its client left keeps its claim.
	rec.hb.start(m, finish, owner, cancel, leaseFrom)
	rec.getBuffer()
	returned := false
	defer func() {
		rec.hb.stop()
		cancel(context.Canceled)
		if returned {
			return
		}
		// The handler panicked (or called runtime.Goexit). Before it
		// wrote anything, no result exists: the claim is released and a
		// retry runs it again. After it started its answer, the outcome
		// is unknown (UnknownOutcome decides). Streamed: its
		// not-replayable marker stands.
		p := recover()
		endPhase(wend, PhaseEnd{Status: rec.status, Err: errHandlerPanicked})
		cr, cfinish, cend := m.completing(r, key, finish)
		switch {
		case rec.completed:
			m.decidedStatus(cr, key, outcomeExecuted, rec.status, errHandlerPanicked)
		case !rec.stream && (rec.wrote || len(rec.body) > 0 || rec.unknown != nil):
			m.settleUnknown(cfinish, nil, cr, key, owner, errHandlerPanicked)
		default:
			m.release(cfinish, owner)
			m.decided(cr, key, outcomeReleased, errHandlerPanicked)
		}
		endPhase(cend, PhaseEnd{})
		if p != nil {
			panic(p)
		}
	}()
	next.ServeHTTP(rec, withBody(ctx, r, body, &rec.reqBody))
	returned = true
	rec.hb.stop()
	endPhase(wend, PhaseEnd{Status: rec.status, Err: rec.unknown})
	cr, cfinish, cend := m.completing(r, key, finish)
	m.finish(cfinish, w, cr, key, owner, rec)
	endPhase(cend, PhaseEnd{})
	// The response is sent (or stored, or given up): the capture buffer
	// goes back to the pool. A handler that (against the net/http rules)
	// writes after returning gets a fresh buffer, never this one.
	rec.recycle()
}

var errHandlerPanicked = errors.New("handler panicked")

// finish stores (or releases) what the handler produced, then answers.
func (m *Middleware) finish(ctx context.Context, w http.ResponseWriter, r *http.Request, key idem.Key, owner idem.Owner, rec *recorder) {
	switch {
	case rec.failed != nil: // the not-replayable marker could not be stored
		m.refuse(w, r, key, probNotStored, "", m.cfg.StoreRetryAfter, 0, rec.failed)
		return
	case rec.unknown != nil:
		m.settleUnknown(ctx, w, r, key, owner, rec.unknown)
		return
	case rec.notSent:
		m.release(ctx, owner)
		resp := rec.response()
		writeResponse(w, resp)
		m.decidedStatus(r, key, outcomeReleased, resp.Status, nil)
		return
	case rec.stream:
		if rec.completed {
			m.decidedStatus(r, key, outcomeExecuted, rec.status, errStreamed)
		} else {
			m.release(ctx, owner)
			m.decidedStatus(r, key, outcomeReleased, rec.status, nil)
		}
		return
	}
	resp := rec.response()
	if !m.cfg.StoreStatusFunc(resp.Status) {
		m.release(ctx, owner)
		writeFirst(w, resp, rec.trailers())
		m.decidedStatus(r, key, outcomeReleased, resp.Status, nil)
		return
	}
	stored := resp
	if m.dropsAny(resp.Header) {
		stored = &storedResponse{Status: resp.Status, Header: resp.Header.Clone(), Body: resp.Body}
		for _, h := range m.drop {
			delete(stored.Header, h)
		}
	}
	err := m.complete(ctx, owner, encodeResponse(stored))
	if errors.Is(err, idem.ErrResultTooLarge) {
		// The store's own limit is below MaxResponse: keep the protection,
		// lose only the replay.
		err = m.complete(ctx, owner, encodeResponse(&storedResponse{Status: stored.Status, Header: stored.Header, NotReplayable: true}))
	}
	if err != nil {
		m.refuse(w, r, key, probNotStored, "", m.cfg.StoreRetryAfter, 0, err)
		return
	}
	writeFirst(w, resp, rec.trailers())
	m.decidedStatus(r, key, outcomeExecuted, resp.Status, nil)
}

// settleUnknown applies the UnknownOutcome policy and, when w is not nil,
// answers with the outcome-unknown problem.
func (m *Middleware) settleUnknown(ctx context.Context, w http.ResponseWriter, r *http.Request, key idem.Key, owner idem.Owner, cause error) {
	resp := m.unknownProblem(cause)
	if m.cfg.UnknownOutcome == ReleaseUnknown {
		m.release(ctx, owner)
	} else {
		resp.OutcomeUnknown = true
		if err := m.complete(ctx, owner, encodeResponse(resp)); err != nil {
			// The claim stays until its lease runs out.
			if w != nil {
				m.refuse(w, r, key, probNotStored, "", m.cfg.StoreRetryAfter, 0, err)
			} else {
				m.decided(r, key, outcomeStoreError, err)
			}
			return
		}
	}
	status := 0
	if w != nil {
		writeResponse(w, resp)
		status = resp.Status
	}
	m.decidedStatus(r, key, outcomeUnknown, status, cause)
}

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

func (m *Middleware) complete(ctx context.Context, owner idem.Owner, data []byte) error {
	t0 := time.Now()
	err := m.store.Complete(ctx, owner, data)
	m.storeCall(ctx, OpComplete, t0, err)
	return err
}

// release gives the claim up so a retry runs. A failure only delays that
// retry until the lease runs out, so it is logged and not returned.
func (m *Middleware) release(ctx context.Context, owner idem.Owner) {
	t0 := time.Now()
	err := m.store.Release(ctx, owner)
	m.storeCall(ctx, OpRelease, t0, err)
	if err != nil && !errors.Is(err, idem.ErrLeaseLost) {
		m.log.LogAttrs(ctx, slog.LevelWarn, "idempotency claim not released; retries wait for its lease to run out",
			slog.String("key", owner.Key.String()), slog.String("error", err.Error()))
	}
}

// refuse answers with problem p and records the decision.
func (m *Middleware) refuse(w http.ResponseWriter, r *http.Request, key idem.Key, p problem, detail string, retryAfter time.Duration, originalStatus int, err error) {
	m.writeRefusal(w, r, p.answer(detail, retryAfter, originalStatus))
	o := p.outcome
	if o == outcomeStoreError && r.Context().Err() != nil {
		o = outcomeCanceled
	}
	m.decidedStatus(r, key, o, p.status, err)
}

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
