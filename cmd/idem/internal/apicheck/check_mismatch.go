// The mismatch checks: mismatch-body, mismatch-query, mismatch-path,
// mismatch-method.

package apicheck

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
)

// mismatch reuses the completed first key for other requests.
func (r *runner) mismatch(ctx context.Context) {
	path := r.cfg.Path
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	body := r.body1()
	variants := []struct {
		id, what, flag, unset string
		req                   request
	}{
		{"mismatch-body", "another body", "--body", "the body template has no " + Placeholder + " to vary", request{method: r.cfg.Method, path: path, body: r.body(unique())}},
		{"mismatch-query", "another query", "--mismatch-query", "name a query string the endpoint takes (--mismatch-query a=1)", request{method: r.cfg.Method, path: path + sep + r.cfg.MismatchQuery, body: body}},
		{"mismatch-path", "another path", "--mismatch-path", "name another path that takes the same request (--mismatch-path)", request{method: r.cfg.Method, path: r.cfg.MismatchPath, body: body}},
		{"mismatch-method", "another method", "--mismatch-method", "name another method the endpoint takes (--mismatch-method)", request{method: r.cfg.MismatchMethod, path: path, body: body}},
	}
	for _, v := range variants {
		title := "the same key with " + v.what + " is refused with 422"
		if !r.on(v.id) {
			continue
		}
		named := map[string]bool{
			"mismatch-body":   strings.Contains(r.cfg.Body, Placeholder),
			"mismatch-query":  r.cfg.MismatchQuery != "",
			"mismatch-path":   r.cfg.MismatchPath != "",
			"mismatch-method": r.cfg.MismatchMethod != "",
		}[v.id]
		if !named {
			r.add(skipped(v.id, title, refDraft, v.flag, v.unset))
			continue
		}
		v.req.key = r.key
		before, err1 := r.count(ctx)
		ex := r.cl.send(ctx, v.req)
		after, err2 := r.count(ctx)
		if res, bad := r.unfinished(v.id, title, refDraft, r.ex1, ex); bad {
			r.add(res)
			continue
		}
		counted := r.cfg.oracle.counts() && err1 == nil && err2 == nil
		var st Status
		var d string
		switch {
		case ex.status == http.StatusUnprocessableEntity:
			st, d = Pass, "422"
		case ex.ok() && counted && after == before:
			st, d = Fail, fmt.Sprintf("the first request's answer was replayed for a different request (%d; the oracle counted no effect)", ex.status)
		case ex.ok() && counted:
			st, d = Fail, fmt.Sprintf("a different request ran under a used key (%d; the oracle counted %s)", ex.status, plural(after-before, "effect"))
		case ex.ok() && replayed(ex.header):
			st, d = Fail, "the first request's answer was replayed for a different request (marked "+markerName(ex.header)+")"
		case ex.ok() && ex.status == r.ex1.status && bytes.Equal(ex.body, r.ex1.body) && r.distinguishes(ctx):
			st, d = Fail, "the first request's answer was replayed for a different request (a fresh key gets another answer)"
		case ex.ok() && ex.status == r.ex1.status && bytes.Equal(ex.body, r.ex1.body):
			st, d = Fail, "a different request got a 2xx answer identical to the first: replayed, or executed with a constant answer; either way not refused ("+r.decide()+")"
		case ex.ok():
			st, d = Fail, fmt.Sprintf("a different request ran under a used key (%d, another answer)", ex.status)
		case ex.status == http.StatusBadRequest || ex.status == http.StatusConflict:
			st, d = Warn, fmt.Sprintf("refused with %d; the draft asks for 422", ex.status)
		case ex.status == http.StatusNotFound || ex.status == http.StatusMethodNotAllowed:
			st, d = Warn, fmt.Sprintf("inconclusive: %d before any key check: %s does not take this request", ex.status, v.flag)
		default:
			st, d = Warn, fmt.Sprintf("answered %d", ex.status)
		}
		r.add(result(v.id, title, refDraft, st, d, r.ex1, ex))
	}
}
