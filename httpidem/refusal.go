package httpidem

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"text/template"
)

// RetryableHeader is sent with every answer the middleware makes itself
// (a refusal, and the outcome-unknown answer): "true" when the same
// request with the same key may succeed later (409 in-flight, 503, 502
// upstream-unreachable, an outcome-unknown answer in ReleaseUnknown mode:
// each also carries Retry-After), "false" when retrying cannot help (a
// held key, a reused key, an invalid key, a body too large). A client (or
// an SDK's retry loop) reads it to stop retrying a request that will
// never succeed.
const RetryableHeader = "Idempotent-Retryable"

// Retryable reports whether retrying the same request with the same key
// may succeed: whether the answer carries Retry-After.
func (p Problem) Retryable() bool { return p.RetryAfter > 0 }

// Code is Name with underscores for hyphens ("in_flight"): an error code
// in the snake_case many APIs use; "" for a type not of this package.
func (p Problem) Code() string { return strings.ReplaceAll(p.Name(), "-", "_") }

// Message is Title, then Detail when there is one: one sentence for an
// error shape with a single message.
func (p Problem) Message() string {
	if p.Detail == "" {
		return p.Title
	}
	return p.Title + ": " + p.Detail
}

func retryableValue(p Problem) []string {
	if p.Retryable() {
		return []string{"true"}
	}
	return []string{"false"}
}

// StripeRefusal is a Config.RefusalFunc that answers in the error shape of
// Stripe-style APIs, which their SDKs raise as errors:
//
//	{"error": {"type": "idempotency_error", "code": "in_flight", "message": "…"}}
//
// with Content-Type application/json and Stripe-Should-Retry (true or
// false, as Idempotent-Retryable), which Stripe's SDKs obey. type is
// idempotency_error for a key in flight or reused with another request,
// api_error for a 5xx, invalid_request_error otherwise; code is
// Problem.Code; message Problem.Message.
func StripeRefusal(w http.ResponseWriter, _ *http.Request, p Problem) {
	typ := "invalid_request_error"
	switch {
	case p.Type == ProblemInFlight || p.Type == ProblemMismatch:
		typ = "idempotency_error"
	case p.Status >= 500:
		typ = "api_error"
	}
	var body struct {
		Error struct {
			Type    string `json:"type"`
			Code    string `json:"code,omitempty"`
			Message string `json:"message"`
		} `json:"error"`
	}
	body.Error.Type, body.Error.Code, body.Error.Message = typ, p.Code(), p.Message()
	b, _ := json.Marshal(body)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h["Stripe-Should-Retry"] = retryableValue(p)
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// TemplateRefusal returns a Config.RefusalFunc that answers with t
// executed on the Problem (its fields, and Name, Code, Message and
// Retryable), as contentType (empty: application/json), with Status. t
// may use the function json, which writes a value as JSON ({{json
// .Message}} is a quoted, escaped string). When t fails, the answer is
// the default problem+json, never a half-written body.
func TemplateRefusal(t *template.Template, contentType string) func(http.ResponseWriter, *http.Request, Problem) {
	if contentType == "" {
		contentType = "application/json"
	}
	return func(w http.ResponseWriter, _ *http.Request, p Problem) {
		var buf bytes.Buffer
		if err := t.Execute(&buf, p); err != nil {
			WriteProblem(w, p)
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Length", strconv.Itoa(buf.Len()))
		w.WriteHeader(p.Status)
		_, _ = w.Write(buf.Bytes())
	}
}

// TemplateFuncs are the functions a TemplateRefusal template may use:
// json. Parse templates with template.New(name).Funcs(TemplateFuncs).
var TemplateFuncs = template.FuncMap{
	"json": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
}

// WriteRefusal answers with p as the middleware answers its own refusals:
// with Config.RefusalFunc (or problem+json), Cache-Control: no-store,
// Idempotent-Retryable and, when p.RetryAfter is positive, Retry-After.
// For a handler behind the middleware (idem proxy's upstream-unreachable
// answer) that refuses in the same shape.
func (m *Middleware) WriteRefusal(w http.ResponseWriter, r *http.Request, p Problem) {
	m.writeRefusal(w, r, p)
}

// renderRefusal is p written by Config.RefusalFunc (or problem+json) as a
// response that can be stored: the outcome-unknown answer HoldUnknown
// stores is in the API's own error shape too.
func (m *Middleware) renderRefusal(r *http.Request, p Problem) *storedResponse {
	if m.cfg.RefusalFunc == nil {
		return problemResponse(p)
	}
	rw := &bufferWriter{header: make(http.Header)}
	m.writeRefusal(rw, r, p)
	if rw.status == 0 {
		rw.status = p.Status
	}
	cleanHeader(rw.header)
	rw.header.Set("Content-Length", strconv.Itoa(rw.body.Len()))
	return &storedResponse{Status: rw.status, Header: rw.header, Body: rw.body.Bytes()}
}

// bufferWriter is an http.ResponseWriter that keeps what is written.
type bufferWriter struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (b *bufferWriter) Header() http.Header { return b.header }

func (b *bufferWriter) WriteHeader(code int) {
	if b.status == 0 && code >= 200 {
		b.status = code
	}
}

func (b *bufferWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}
