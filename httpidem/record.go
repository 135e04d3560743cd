package httpidem

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/idemkit/idem"
)

// StoredResponse is a key's result as the middleware stores it, decoded:
// what 'idem keys get', the proxy's operations page and a Go service's own
// tools show of an HTTP record.
type StoredResponse struct {
	Status int
	Header http.Header
	Body   []byte
	// NotReplayable: the response was streamed or too large to store;
	// Status and Header are kept, Body is empty.
	NotReplayable bool
	// OutcomeUnknown: the key is held (idem.StateHeld); the response is
	// the outcome-unknown problem replayed to every retry.
	OutcomeUnknown bool
	// Request and ScopeDigest describe the request a held key belongs to
	// (empty in records of earlier releases): its method and path
	// ("POST /orders", never the query), and ScopeDigest(scope). They are
	// stored with the held answer and never sent to clients.
	Request     string
	ScopeDigest string
	// Step is the step of an operation of steps (package step) the key
	// is held in, when the handler's OutcomeUnknown cause named one (a
	// *step.UnknownError); a zero Name otherwise, and in records of
	// earlier releases.
	Step idem.HeldStep
}

// Headers that carry a held answer's Request and ScopeDigest in the
// stored record. The replay removes them: clients never see them.
const (
	heldRequestHeader = "Idem-Held-Request"
	heldScopeHeader   = "Idem-Held-Scope"
	heldStepHeader    = "Idem-Held-Step" // the JSON of an idem.HeldStep
)

// ScopeDigest returns the first 16 hex digits of the SHA-256 of scope: a
// name for a caller's scope that operators can compare and that reveals
// nothing of it (the scope itself may hold a tenant name or a credential's
// hash).
func ScopeDigest(scope string) string {
	sum := sha256.Sum256([]byte(scope))
	return hex.EncodeToString(sum[:8])
}

// DecodeResponse decodes a result stored by the middleware (any encoding
// version this release reads). It rejects anything the middleware would
// not have written.
func DecodeResponse(data []byte) (StoredResponse, error) {
	r, err := decodeResponse(data)
	if err != nil {
		return StoredResponse{}, err
	}
	out := StoredResponse{Status: r.Status, Header: r.Header, Body: r.Body, NotReplayable: r.NotReplayable, OutcomeUnknown: r.OutcomeUnknown}
	if out.Header == nil {
		out.Header = http.Header{}
	}
	if r.OutcomeUnknown {
		out.Request = out.Header.Get(heldRequestHeader)
		out.ScopeDigest = out.Header.Get(heldScopeHeader)
		if v := out.Header.Get(heldStepHeader); v != "" {
			if json.Unmarshal([]byte(v), &out.Step) != nil {
				out.Step = idem.HeldStep{}
			}
		}
		delete(out.Header, heldRequestHeader)
		delete(out.Header, heldScopeHeader)
		delete(out.Header, heldStepHeader)
	}
	return out, nil
}

// EncodeResponse encodes a response as the key's result, the way the
// middleware stores a first response: for resolving a held key with the
// answer the service gave (idem.Resolve, 'idem keys resolve'). Header
// names are canonicalised; hop-by-hop headers, trailer declarations and
// Idempotent-Replayed are dropped, as they are from stored responses.
// Content-Length is set from the body when the status allows one.
func EncodeResponse(status int, header http.Header, body []byte) ([]byte, error) {
	if status < 200 || status > 999 {
		return nil, fmt.Errorf("httpidem: status %d: a stored response has a final status, 200 to 999", status)
	}
	if len(body) > 0 && !bodyAllowed(status) {
		return nil, fmt.Errorf("httpidem: a %d response has no body", status)
	}
	h := make(http.Header, len(header)+1)
	for k, vs := range header {
		if !validHeaderName([]byte(k)) {
			return nil, fmt.Errorf("httpidem: invalid header name %q", k)
		}
		for _, v := range vs {
			if !validHeaderValue([]byte(v)) {
				return nil, fmt.Errorf("httpidem: invalid value of header %q", k)
			}
		}
		ck := http.CanonicalHeaderKey(k)
		h[ck] = append(h[ck], vs...)
	}
	cleanHeader(h)
	delete(h, heldRequestHeader)
	delete(h, heldScopeHeader)
	delete(h, heldStepHeader)
	if bodyAllowed(status) {
		h["Content-Length"] = []string{fmt.Sprint(len(body))}
	}
	return encodeResponse(&storedResponse{Status: status, Header: h, Body: body}), nil
}

// heldStepper is an OutcomeUnknown cause that names the step the key is
// held in: *step.UnknownError.
type heldStepper interface{ HeldStep() idem.HeldStep }

// causeStep returns the step cause names, if any.
func causeStep(cause error) idem.HeldStep {
	var hs heldStepper
	if errors.As(cause, &hs) {
		h := hs.HeldStep()
		h.Finished = h.Finished[max(len(h.Finished)-idem.MaxHeldFinished, 0):]
		return h
	}
	return idem.HeldStep{}
}

// heldRecord is resp, an outcome-unknown problem, with the request, the
// scope digest and the step (if any) it is stored with (see
// StoredResponse.Request).
func heldRecord(resp *storedResponse, r *http.Request, scope string, step idem.HeldStep) *storedResponse {
	h := resp.Header.Clone()
	if r != nil {
		h[heldRequestHeader] = []string{requestLine(r)}
	}
	h[heldScopeHeader] = []string{ScopeDigest(scope)}
	if step.Name != "" {
		// JSON escapes CR, LF and NUL: a valid stored header value.
		data, _ := json.Marshal(step)
		h[heldStepHeader] = []string{string(data)}
	}
	out := *resp
	out.Header = h
	return &out
}

// requestLine is r's method and path, safe to store as a header value.
func requestLine(r *http.Request) string {
	p := r.URL.EscapedPath()
	if p == "" {
		p = "/"
	}
	line := r.Method + " " + p
	if len(line) > 512 {
		line = line[:512]
	}
	return strings.Map(func(c rune) rune {
		if c == '\r' || c == '\n' || c == 0 {
			return -1
		}
		return c
	}, line)
}
