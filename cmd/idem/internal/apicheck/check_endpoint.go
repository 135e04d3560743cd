// The endpoint check: the first well-formed request every check needs.

package apicheck

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

// problemType returns the last segment of a problem+json answer's type
// ("scope-required"), or "".
func problemType(ex *exchange) string {
	if !strings.Contains(ex.header.Get("Content-Type"), "json") {
		return ""
	}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(ex.body, &p) != nil || p.Type == "" {
		return ""
	}
	if i := strings.LastIndexAny(p.Type, "/#:"); i >= 0 {
		return p.Type[i+1:]
	}
	return p.Type
}

// endpointHint names what a refused first request says and the flag that
// fixes it.
func endpointHint(ex *exchange) string {
	if ex.err != nil {
		if ex.timedOut() {
			return "no answer: " + ex.timing() + "; is the service up, and is --timeout long enough?"
		}
		if ex.connected == 0 {
			return "nothing answered at the URL's host (" + ex.err.Error() + "): check the URL"
		}
		return ex.err.Error()
	}
	pt := problemType(ex)
	got := fmt.Sprintf("answered %d", ex.status)
	if pt != "" {
		got += " " + pt
	}
	var fix string
	switch {
	case pt == "scope-required" || pt == "scope-rejected" || ex.status == http.StatusUnauthorized || ex.status == http.StatusForbidden:
		fix = "the API wants to know the caller: give its credentials with --header 'Authorization: …' (or the header the API reads)"
	case pt == "missing-key" || pt == "invalid-key" || pt == "multiple-keys":
		fix = "the API does not read the key where it is sent: check --key-header"
	case pt == "body-not-json" || pt == "body-unreadable" || ex.status == http.StatusUnsupportedMediaType:
		fix = "the API does not take this body: check --body and --content-type"
	case pt == "body-too-large" || ex.status == http.StatusRequestEntityTooLarge:
		fix = "the body is too large for the API: shorten --body"
	case ex.status == http.StatusNotFound:
		fix = "no such endpoint: check the URL's path prefix and --path"
	case ex.status == http.StatusMethodNotAllowed:
		fix = "the endpoint does not take this method: check --method"
	case ex.status == http.StatusBadRequest || ex.status == http.StatusUnprocessableEntity:
		fix = "the API refused the request itself: check --body, --content-type and --header"
	case ex.status >= 300 && ex.status < 400:
		fix = "a redirect to " + ex.header.Get("Location") + " (never followed): give that URL"
	case ex.status >= 500:
		fix = "the service failed: is it healthy, and is --path a working endpoint?"
	default:
		fix = "check the URL, --path, --body and --header"
	}
	return got + ": " + fix
}

// endpoint sends the first well-formed request: every check needs it.
func (r *runner) endpoint(ctx context.Context) error {
	r.key, r.body1st = newKey(), r.body(unique())
	r.before, r.countErr = r.count(ctx)
	r.ex1 = r.cl.send(ctx, r.first(r.key, r.body1st))
	if r.ex1.err != nil || !r.ex1.ok() {
		res := result("endpoint", "a well-formed first request succeeds", refDraft, Fail, endpointHint(r.ex1), r.ex1)
		r.add(res)
		return fmt.Errorf("%w (%s)", ErrEndpoint, describe(r.ex1))
	}
	return nil
}
