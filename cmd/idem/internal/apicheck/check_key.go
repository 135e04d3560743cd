// The key checks: key-required, key-empty, key-too-long, key-control,
// key-two-lines, key-forms.

package apicheck

import (
	"context"
	"fmt"
	"net/http"
	"strings"
)

func (r *runner) keyRequired(ctx context.Context) {
	const id, title = "key-required", "a request without a key is refused"
	if !r.on(id) {
		return
	}
	if !r.cfg.RequireKey {
		r.add(skipped(id, title, refDraft, "--require-key", "the key is not declared required (--require-key)"))
		return
	}
	ex := r.cl.send(ctx, r.first("", r.body(unique())))
	if res, bad := r.unfinished(id, title, refDraft, ex); bad {
		r.add(res)
		return
	}
	switch {
	case ex.status == http.StatusBadRequest:
		r.add(result(id, title, refDraft, Pass, "400", ex))
	case ex.status >= 400 && ex.status < 500:
		r.add(result(id, title, refDraft, Pass, fmt.Sprintf("%d (the draft suggests 400)", ex.status), ex))
	case ex.ok():
		r.add(result(id, title, refDraft, Fail, fmt.Sprintf("accepted without a key (%d)", ex.status), ex))
	default:
		r.add(result(id, title, refDraft, Warn, fmt.Sprintf("answered %d", ex.status), ex))
	}
}

func (r *runner) keySyntax(ctx context.Context) {
	long := `"` + strings.Repeat("k", 256) + `"`
	cases := []struct {
		id, title string
		lines     []string
		accept    Status // verdict when the request is accepted
	}{
		{"key-empty", "an empty key is refused with 4xx", []string{`""`}, Fail},
		{"key-too-long", "a 256-character key is refused with 4xx", []string{long}, Warn},
		{"key-control", "a key with a control character is refused with 4xx", []string{"\"ab\x01" + unique() + "\""}, Fail},
		{"key-two-lines", "two key header lines are refused with 4xx", []string{newKey(), newKey()}, Fail},
	}
	for _, c := range cases {
		if !r.on(c.id) {
			continue
		}
		title := c.title
		req := r.first(fmt.Sprintf("%q", strings.Join(c.lines, "\n")), r.body(unique()))
		ex := r.cl.sendRaw(ctx, req, c.lines)
		if res, bad := r.unfinished(c.id, title, refDraft, ex); bad {
			r.add(res)
			continue
		}
		switch {
		case ex.status >= 400 && ex.status < 500:
			r.add(result(c.id, title, refDraft, Pass, fmt.Sprintf("%d", ex.status), ex))
		case ex.ok():
			d := fmt.Sprintf("accepted (%d)", ex.status)
			if c.id == "key-too-long" {
				d += "; Stripe and most APIs cap keys at 255 characters"
			}
			r.add(result(c.id, title, refDraft, c.accept, d, ex))
		default:
			r.add(result(c.id, title, refDraft, Warn, fmt.Sprintf("answered %d", ex.status), ex))
		}
	}
}

func (r *runner) keyForms(ctx context.Context) {
	const id, title = "key-forms", `the quoted ("k") and bare (k) forms are one key`
	if !r.on(id) {
		return
	}
	bare := "idemcheck-" + unique()
	body := r.body(unique())
	before, err1 := r.count(ctx)
	ex1 := r.cl.send(ctx, r.first(`"`+bare+`"`, body))
	ex2 := r.cl.send(ctx, r.first(bare, body))
	after, err2 := r.count(ctx)
	if res, bad := r.unfinished(id, title, refDraft, ex1, ex2); bad {
		r.add(res)
		return
	}
	if !ex1.ok() || !ex2.ok() {
		r.add(result(id, title, refDraft, Warn, fmt.Sprintf("answers %d and %d", ex1.status, ex2.status), ex1, ex2))
		return
	}
	obs, why := r.judge(ctx, ex1, ex2, after-before-1, r.cfg.oracle.counts() && err1 == nil && err2 == nil)
	switch obs {
	case replayedRun:
		r.add(result(id, title, refDraft, Pass, "the bare form replays the quoted one ("+why+")", ex1, ex2))
	case executedRun:
		r.add(result(id, title, refDraft, Warn, "the bare form was executed again ("+why+"): a client that switches forms executes twice", ex1, ex2))
	default:
		r.add(result(id, title, refDraft, Warn, "cannot tell: "+why+"; "+r.decide(), ex1, ex2, r.probe))
	}
}
