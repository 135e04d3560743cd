// The failure-policy check.

package apicheck

import (
	"bytes"
	"context"
	"fmt"
)

func (r *runner) failures(ctx context.Context) {
	const id = "failure-policy"
	if !r.on(id) {
		return
	}
	title, ref := "a 5xx is not stored: the retry runs again", refDraft
	if r.cfg.StoresFailures {
		title, ref = "a 5xx is stored and replayed (declared)", refStripe
	}
	if r.cfg.FailPath == "" {
		r.add(skipped(id, title, ref, "--fail-path", "name a failing variant of the endpoint (--fail-path)"))
		return
	}
	key, body := newKey(), r.body(unique())
	req := request{method: r.cfg.Method, path: r.cfg.FailPath, key: key, body: body}
	before, err1 := r.count(ctx)
	ex1 := r.cl.send(ctx, req)
	ex2 := r.cl.send(ctx, req)
	after, err2 := r.count(ctx)
	if res, bad := r.unfinished(id, title, ref, ex1, ex2); bad {
		r.add(res)
		return
	}
	if ex1.status < 500 {
		r.add(result(id, title, ref, Warn, fmt.Sprintf("the failing variant answered %d, not 5xx", ex1.status), ex1, ex2))
		return
	}
	var stored, known bool
	var why string
	switch {
	case r.cfg.oracle.counts() && err1 == nil && err2 == nil && after-before > 0:
		stored, known, why = after-before == 1, true, "the oracle counted "+plural(after-before, "effect")
	case replayed(ex2.header):
		stored, known, why = true, true, "marked "+markerName(ex2.header)
	case ex2.status != ex1.status || !bytes.Equal(ex1.body, ex2.body):
		stored, known, why = false, true, "another answer"
	case r.marks:
		stored, known, why = false, true, "not marked as a replay, though the API marks its replays"
	}
	switch {
	case !known:
		r.add(result(id, title, ref, Warn, "identical failures and no replay marker: cannot tell whether the retry ran", ex1, ex2))
	case stored == r.cfg.StoresFailures && stored:
		r.add(result(id, title, ref, Pass, "the failure was stored and replayed ("+why+")", ex1, ex2))
	case stored == r.cfg.StoresFailures:
		r.add(result(id, title, ref, Pass, "the retry ran again ("+why+")", ex1, ex2))
	case stored:
		r.add(result(id, title, ref, Fail, "the 5xx was stored ("+why+"): every retry with this key fails, though the next attempt might succeed", ex1, ex2))
	default:
		r.add(result(id, title, ref, Fail, "the 5xx was not stored ("+why+"), though the API declares that it stores failures", ex1, ex2))
	}
}
