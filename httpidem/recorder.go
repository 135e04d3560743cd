package httpidem

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/idemkit/idem"
)

// ErrHijackProtected is what Hijack returns to a handler serving a
// protected request: a hijacked connection has no response to store, so
// the operation could not be replayed. Upgrades (WebSocket) belong on
// unprotected methods.
var ErrHijackProtected = errors.New("httpidem: a protected request cannot be hijacked: its response must be stored")

// errNotStored is returned by Write after the not-replayable marker could
// not be stored: nothing has reached the client, which gets a 503.
var errNotStored = errors.New("httpidem: response not stored; the client gets 503")

// recorder buffers the handler's response until the record is stored.
//
//   - Flush is absorbed while buffering: nothing reaches the client before
//     Complete made the result durable.
//   - Past MaxResponse bytes the response switches to streaming: the record
//     is first completed with a not-replayable marker (status and headers),
//     then the buffer and the rest go straight to the client, and Flush
//     works. Statuses that are not stored stream without a marker and
//     release the claim at the end.
//   - Hijack returns ErrHijackProtected. 1xx informational responses are
//     dropped. Trailers (declared in Trailer, or with http.TrailerPrefix)
//     are sent after the body of the first response, never stored, never
//     merged into the header block; replays have none.
type recorder struct {
	m      *Middleware
	w      http.ResponseWriter
	method string
	header http.Header
	status int
	wrote  bool
	body   []byte

	attempt idem.Attempt // the claim the handler runs under

	stream    bool        // past MaxResponse: writing through to w
	completed bool        // the not-replayable marker is stored
	failed    error       // storing the marker failed
	notSent   bool        // NotSent: release whatever the answer
	late      http.Header // Header() after the status: trailers only
	declared  []string    // trailer names declared in the Trailer header
	unknown   error       // OutcomeUnknown's cause

	// Per-request state kept here so that one allocation serves it all.
	bufp    *[]byte        // pooled capture buffer that body came from
	reqBody bodyReader     // the request body the handler reads
	resp    storedResponse // what response returns
	clen    [1]string      // the Content-Length value
}

// bufPool holds capture buffers. Buffers that grew past maxPooledBuffer
// are left to the garbage collector so that one large response does not
// pin its memory.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

const maxPooledBuffer = 64 << 10

func (rw *recorder) getBuffer() {
	rw.bufp = bufPool.Get().(*[]byte)
	rw.body = (*rw.bufp)[:0]
}

// recycle returns the capture buffer to the pool, once the response has
// been sent and stored (stores copy what Complete is given; writers must
// not retain what Write is given).
func (rw *recorder) recycle() {
	if rw.bufp == nil {
		return
	}
	if b := rw.body; b != nil && cap(b) <= maxPooledBuffer {
		*rw.bufp = b[:0]
		bufPool.Put(rw.bufp)
	}
	rw.bufp, rw.body, rw.resp.Body = nil, nil, nil
}

// Header returns the header map. Once the status is written, changes to
// the headers no longer count (as with net/http), except trailers: the
// handler then gets a map of its own whose declared (Trailer) or
// TrailerPrefix entries become the first response's trailers.
func (rw *recorder) Header() http.Header {
	if rw.wrote && !rw.stream {
		if rw.late == nil {
			rw.late = make(http.Header)
		}
		return rw.late
	}
	return rw.header
}

// trailers returns the trailers the handler set, or nil.
func (rw *recorder) trailers() http.Header {
	var t http.Header
	add := func(k string, vs []string) {
		if t == nil {
			t = make(http.Header)
		}
		t[k] = vs
	}
	for k, vs := range rw.header {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			add(textproto.CanonicalMIMEHeaderKey(k[len(http.TrailerPrefix):]), vs)
		}
	}
	if rw.late == nil {
		return t
	}
	declared := rw.declared
	for k, vs := range rw.late {
		if strings.HasPrefix(k, http.TrailerPrefix) {
			add(textproto.CanonicalMIMEHeaderKey(k[len(http.TrailerPrefix):]), vs)
		} else if slices.Contains(declared, k) {
			add(k, vs)
		}
	}
	return t
}

func (rw *recorder) WriteHeader(code int) {
	if code < 100 || code > 999 {
		panic(fmt.Sprintf("invalid WriteHeader code %v", code)) // as net/http does
	}
	if rw.wrote || code < 200 {
		return // superfluous, or informational: not part of the stored response
	}
	rw.status = code
	rw.wrote = true
	// The trailers declared before the status: the only headers that may
	// still be set.
	for _, v := range rw.header["Trailer"] {
		for name := range strings.SplitSeq(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				rw.declared = append(rw.declared, textproto.CanonicalMIMEHeaderKey(name))
			}
		}
	}
}

func (rw *recorder) Write(p []byte) (int, error) {
	if rw.failed != nil {
		return 0, errNotStored
	}
	if !rw.wrote {
		rw.WriteHeader(http.StatusOK)
	}
	if rw.stream {
		return rw.w.Write(p)
	}
	if !bodyAllowed(rw.status) {
		return 0, http.ErrBodyNotAllowed
	}
	if len(rw.body)+len(p) > rw.m.cfg.MaxResponse {
		if err := rw.startStream(); err != nil {
			return 0, err
		}
		return rw.w.Write(p)
	}
	rw.body = append(rw.body, p...)
	return len(p), nil
}

func (rw *recorder) WriteString(s string) (int, error) {
	if !rw.stream && rw.failed == nil && rw.wrote && bodyAllowed(rw.status) && len(rw.body)+len(s) <= rw.m.cfg.MaxResponse {
		rw.body = append(rw.body, s...)
		return len(s), nil
	}
	return rw.Write([]byte(s))
}

// startStream stores the not-replayable marker (for a status that is
// stored) and sends what was buffered. From here on the operation is
// completed: a retry gets 410 response-not-replayable, never a second run.
func (rw *recorder) startStream() error {
	h := rw.header.Clone()
	cleanHeader(h)
	if rw.m.cfg.StoreStatusFunc(rw.status) {
		marker := &storedResponse{Status: rw.status, Header: h.Clone(), NotReplayable: true}
		for _, d := range rw.m.drop {
			delete(marker.Header, d)
		}
		if err := rw.attempt.Complete(encodeResponse(marker), nil); err != nil {
			rw.failed = err
			return errNotStored
		}
		rw.completed = true
	}
	rw.stream = true
	dst := rw.w.Header()
	for k, vs := range h {
		dst[k] = vs
	}
	rw.header = dst // later changes (trailers) go to the real response
	rw.w.WriteHeader(rw.status)
	if len(rw.body) > 0 {
		if _, err := rw.w.Write(rw.body); err != nil {
			return err
		}
	}
	rw.recycle() // what was buffered has been written
	return nil
}

// Flush is absorbed while the response is buffered (it reaches the client
// once stored) and flushes when streaming.
func (rw *recorder) Flush() { _ = rw.FlushError() }

// FlushError is Flush for http.ResponseController.
func (rw *recorder) FlushError() error {
	if !rw.stream {
		return nil
	}
	return http.NewResponseController(rw.w).Flush()
}

// Hijack refuses: see ErrHijackProtected.
func (rw *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, ErrHijackProtected
}

// Unwrap lets http.ResponseController reach the connection for deadlines
// and full duplex. Flush and Hijack are answered by the recorder itself.
func (rw *recorder) Unwrap() http.ResponseWriter { return rw.w }

// response returns the buffered response in the form that is both sent
// and stored: hop-by-hop headers removed, Content-Type sniffed and
// Content-Length set as net/http would, so a replay is byte for byte the
// first answer.
func (rw *recorder) response() *storedResponse {
	status := rw.status
	if !rw.wrote {
		status = http.StatusOK
	}
	h := rw.header
	cleanHeader(h)
	body := rw.body
	if bodyAllowed(status) {
		if _, ok := h["Content-Type"]; !ok && len(body) > 0 {
			h["Content-Type"] = []string{http.DetectContentType(body)}
		}
		if rw.method != http.MethodHead {
			rw.clen[0] = strconv.Itoa(len(body))
			h["Content-Length"] = rw.clen[:1:1]
		}
	}
	if len(body) == 0 || !bodyAllowed(status) {
		body = nil
	}
	rw.resp = storedResponse{Status: status, Header: h, Body: body}
	return &rw.resp
}
