package httpidem

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Problem type URIs: the "type" member of every RFC 9457
// application/problem+json body the middleware writes. They are stable:
// clients may switch on them. Each one is documented at its URI.
const (
	problemBase = "https://github.com/idemkit/idem/blob/main/httpidem/problems.md#"

	ProblemMissingKey       = problemBase + "missing-key"
	ProblemInvalidKey       = problemBase + "invalid-key"
	ProblemMultipleKeys     = problemBase + "multiple-keys"
	ProblemScope            = problemBase + "scope-rejected"
	ProblemScopeRequired    = problemBase + "scope-required"
	ProblemBodyTooLarge     = problemBase + "body-too-large"
	ProblemBodyUnreadable   = problemBase + "body-unreadable"
	ProblemBodyNotJSON      = problemBase + "body-not-json"
	ProblemMismatch         = problemBase + "key-reused"
	ProblemInFlight         = problemBase + "in-flight"
	ProblemNotReplayable    = problemBase + "response-not-replayable"
	ProblemStoreUnavailable = problemBase + "store-unavailable"
	ProblemNotStored        = problemBase + "result-not-stored"
	ProblemRecordUnreadable = problemBase + "record-unreadable"
	ProblemOutcomeUnknown   = problemBase + "outcome-unknown"
	ProblemUpgrade          = problemBase + "upgrade-not-protected"
	// ProblemBusy: the process's request memory budget (Config.Budget)
	// was full for the whole wait: nothing was recorded, and the same
	// request may succeed after Retry-After.
	ProblemBusy = problemBase + "memory-budget"
	// ProblemEncodingNotAccepted answers a retry whose Accept-Encoding
	// does not accept the Content-Encoding of the stored response, when
	// that encoding is not gzip (which is decoded for it).
	ProblemEncodingNotAccepted = problemBase + "encoding-not-accepted"
	// ProblemUpstreamUnreachable is idem proxy's answer when the service
	// could not be reached (nothing was sent): the claim is released and a
	// retry after Retry-After may succeed.
	ProblemUpstreamUnreachable = problemBase + "upstream-unreachable"
)

// problem is one row of the table that maps every refusal to a status.
type problem struct {
	typ    string
	title  string
	status int
	// retryAfter: the answer carries Retry-After (the same request may
	// succeed later).
	retryAfter bool
	outcome    outcome
}

// The one table of refusals. Details never contain the key, the scope or
// anything else the request carried, so two tenants get identical shapes.
var (
	probMissingKey       = problem{ProblemMissingKey, "Idempotency-Key header required", http.StatusBadRequest, false, outcomeRejected}
	probInvalidKey       = problem{ProblemInvalidKey, "Invalid Idempotency-Key", http.StatusBadRequest, false, outcomeRejected}
	probMultipleKeys     = problem{ProblemMultipleKeys, "More than one Idempotency-Key", http.StatusBadRequest, false, outcomeRejected}
	probScope            = problem{ProblemScope, "Request scope rejected", http.StatusBadRequest, false, outcomeRejected}
	probScopeRequired    = problem{ProblemScopeRequired, "Caller identity required", http.StatusBadRequest, false, outcomeRejected}
	probBodyTooLarge     = problem{ProblemBodyTooLarge, "Request body too large", http.StatusRequestEntityTooLarge, false, outcomeRejected}
	probBodyUnreadable   = problem{ProblemBodyUnreadable, "Request body could not be read", http.StatusBadRequest, false, outcomeRejected}
	probBodyNotJSON      = problem{ProblemBodyNotJSON, "Request body is not valid JSON", http.StatusBadRequest, false, outcomeRejected}
	probMismatch         = problem{ProblemMismatch, "Idempotency-Key reused with a different request", http.StatusUnprocessableEntity, false, outcomeMismatch}
	probInFlight         = problem{ProblemInFlight, "A request with this Idempotency-Key is being processed", http.StatusConflict, true, outcomeInFlight}
	probNotReplayable    = problem{ProblemNotReplayable, "The original response cannot be replayed", http.StatusGone, false, outcomeNotReplayable}
	probStoreUnavailable = problem{ProblemStoreUnavailable, "Idempotency store unavailable", http.StatusServiceUnavailable, true, outcomeStoreError}
	probNotStored        = problem{ProblemNotStored, "The result could not be stored", http.StatusServiceUnavailable, true, outcomeStoreError}
	probRecordUnreadable = problem{ProblemRecordUnreadable, "The stored response cannot be read", http.StatusInternalServerError, false, outcomeStoreError}
	probUpgrade          = problem{ProblemUpgrade, "A protected request cannot upgrade the connection", http.StatusBadRequest, false, outcomeRejected}
	probBusy             = problem{ProblemBusy, "Request memory budget exhausted", http.StatusServiceUnavailable, true, outcomeRejected}

	probEncodingNotAccepted = problem{ProblemEncodingNotAccepted, "The stored response is in an encoding the request does not accept", http.StatusNotAcceptable, false, outcomeRejected}

	probOutcomeUnknown        = problem{ProblemOutcomeUnknown, "The outcome of the request is unknown", http.StatusBadGateway, false, outcomeUnknown}
	probOutcomeUnknownTimeout = problem{ProblemOutcomeUnknown, "The outcome of the request is unknown", http.StatusGatewayTimeout, false, outcomeUnknown}
)

// Problem is an RFC 9457 application/problem+json answer. Packages built on
// the middleware (onetime/formtoken) answer their own refusals with it, so
// every refusal a client sees has the same shape and headers.
//
// It is also what Config.RefusalFunc is given: every answer the middleware
// makes itself instead of running or replaying the handler (400 missing,
// invalid or multiple keys, scope-required, scope-rejected,
// upgrade-not-protected, body-not-json; 409 in-flight; 410
// response-not-replayable; 413; 422 key-reused; 500 record-unreadable; 503
// store-unavailable and result-not-stored). Type is one of the Problem…
// URIs and Name its short form ("in-flight"), for a table of one's own
// error codes; Title and Detail are safe to show (they never repeat the
// key, the scope or anything else the request carried).
//
// Before RefusalFunc runs, the middleware sets the headers that carry the
// answer's meaning: Cache-Control: no-store (a refusal must not be cached
// as the answer for the URL), Idempotent-Retryable (RetryableHeader: true
// or false) and, when RetryAfter is positive, Retry-After in whole
// seconds (when the same request may succeed; a client's retry loop
// depends on it, whatever the body's format). StripeRefusal and
// TemplateRefusal are ready-made writers. The
// writer sets its Content-Type, writes the status (Status, unless it has a
// reason to differ: clients switch on 409 and 422) and its body. It may
// change those headers, knowingly. If it writes nothing, the middleware
// sends Status with an empty body, so a refusal never turns into a 200.
//
// Stored answers are not refusals: a replayed response is sent as it was
// stored, byte for byte. The outcome-unknown answer (502/504) that
// HoldUnknown stores as a key's result and its first caller gets is
// written by RefusalFunc once, when it is stored, and every retry gets
// those bytes.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
	// OriginalStatus is set on response-not-replayable answers: the
	// status the operation completed with.
	OriginalStatus int `json:"original_status,omitempty"`
	// RetryAfter, when positive, is sent as Retry-After, rounded up to
	// whole seconds.
	RetryAfter time.Duration `json:"-"`
}

// WriteProblem answers with p: its JSON body, Content-Type
// application/problem+json, Content-Length, Cache-Control: no-store,
// Idempotent-Retryable and, when p.RetryAfter is positive, Retry-After.
func WriteProblem(w http.ResponseWriter, p Problem) {
	body, _ := json.Marshal(p)
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("Cache-Control", "no-store")
	h[RetryableHeader] = retryableValue(p)
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(p.RetryAfter), 10))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}

// Name returns the name of a problem type of this package: the part of
// its URI after '#' ("in-flight" for ProblemInFlight), or "" for a type
// that is not one of the Problem… constants.
func (p Problem) Name() string {
	name, ok := strings.CutPrefix(p.Type, problemBase)
	if !ok {
		return ""
	}
	return name
}

// problemResponse is p as a response that can be stored and replayed.
func problemResponse(p Problem) *storedResponse {
	body, _ := json.Marshal(p)
	h := http.Header{
		"Content-Type":   {"application/problem+json"},
		"Content-Length": {strconv.Itoa(len(body))},
		"Cache-Control":  {"no-store"},
		RetryableHeader:  retryableValue(p),
	}
	if p.RetryAfter > 0 {
		h["Retry-After"] = []string{strconv.FormatInt(retryAfterSeconds(p.RetryAfter), 10)}
	}
	return &storedResponse{Status: p.Status, Header: h, Body: body}
}

// answer is a row of the table as the Problem to send. retryAfter is used
// when p carries Retry-After; it is rounded up to whole seconds, at least
// one.
func (p problem) answer(detail string, retryAfter time.Duration, originalStatus int) Problem {
	if !p.retryAfter {
		retryAfter = 0
	} else if retryAfter <= 0 {
		retryAfter = time.Nanosecond // still answer "Retry-After: 1"
	}
	return Problem{Type: p.typ, Title: p.title, Status: p.status, Detail: detail, OriginalStatus: originalStatus, RetryAfter: retryAfter}
}

// writeRefusal sends p with Config.RefusalFunc, or as problem+json.
func (m *Middleware) writeRefusal(w http.ResponseWriter, r *http.Request, p Problem) {
	if m.cfg.RefusalFunc == nil {
		WriteProblem(w, p)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h[RetryableHeader] = retryableValue(p)
	if p.RetryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(retryAfterSeconds(p.RetryAfter), 10))
	}
	rw := refusalWriter{ResponseWriter: w}
	m.cfg.RefusalFunc(&rw, r, p)
	if !rw.wrote {
		w.WriteHeader(p.Status)
	}
}

// refusalWriter notes whether a RefusalFunc wrote anything.
type refusalWriter struct {
	http.ResponseWriter
	wrote bool
}

func (w *refusalWriter) WriteHeader(code int) {
	if code >= 200 {
		w.wrote = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *refusalWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *refusalWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func retryAfterSeconds(d time.Duration) int64 {
	s := int64((d + time.Second - 1) / time.Second)
	return max(s, 1)
}
