// The scope checks: scope-replay and scope-reveal.

package apicheck

import (
	"context"
	"fmt"
	"net/http"
)

func (r *runner) scopes(ctx context.Context) {
	const ref = refDraft + "; " + refSeed
	const idR, titleR = "scope-replay", "one caller's key never replays another caller's response"
	const idV, titleV = "scope-reveal", "a refusal never reveals another caller's key"
	if !r.anyOn(idR, idV) {
		return
	}
	if len(r.cfg.other) == 0 {
		r.add(skipped(idR, titleR, ref, "--other-header", "give a second caller's credentials (--other-header)"))
		r.add(skipped(idV, titleV, ref, "--other-header", "give a second caller's credentials (--other-header)"))
		return
	}
	// A scope shows only where the API replays at all: caller A's own
	// retry must have been a replay.
	r.retry(ctx)
	if res, bad := r.unfinished(idR, titleR, ref, r.ex1, r.ex2); bad {
		r.add(res)
		res.ID, res.Title = idV, titleV
		r.add(res)
		return
	}
	switch r.own {
	case executedRun:
		d := "caller A's own retry was executed, not replayed (" + r.ownWhy + "): another caller's request running on its own shows nothing about scopes"
		r.add(result(idR, titleR, ref, Warn, d, r.ex1, r.ex2))
		r.add(result(idV, titleV, ref, Warn, d, r.ex1, r.ex2))
		return
	case unknownRun:
		d := "cannot tell whether the API replays at all: " + r.ownWhy + "; " + r.decide()
		r.add(result(idR, titleR, ref, Warn, d, r.ex1, r.ex2))
		r.add(result(idV, titleV, ref, Warn, d, r.ex1, r.ex2))
		return
	}
	counted := func(e1, e2 error) bool { return r.cfg.oracle.counts() && e1 == nil && e2 == nil }

	if r.on(idR) {
		key, body := newKey(), r.body(unique())
		before, err1 := r.count(ctx)
		exA := r.cl.send(ctx, r.first(key, body))
		reqB := r.first(key, body)
		reqB.callerB = true
		exB := r.cl.send(ctx, reqB)
		after, err2 := r.count(ctx)
		if res, bad := r.unfinished(idR, titleR, ref, exA, exB); bad {
			r.add(res)
		} else {
			switch {
			case !exA.ok():
				r.add(result(idR, titleR, ref, Warn, fmt.Sprintf("caller A got %d", exA.status), exA, exB))
			case exB.status == http.StatusConflict || exB.status == http.StatusUnprocessableEntity:
				r.add(result(idR, titleR, ref, Fail, fmt.Sprintf("caller B was refused with %d because of caller A's key", exB.status), exA, exB))
			case !exB.ok():
				r.add(result(idR, titleR, ref, Warn, fmt.Sprintf("caller B got %d: check --other-header", exB.status), exA, exB))
			default:
				obs, why := r.judge(ctx, exA, exB, after-before-1, counted(err1, err2))
				switch obs {
				case replayedRun:
					r.add(result(idR, titleR, ref, Fail, "caller B got caller A's answer ("+why+")", exA, exB))
				case executedRun:
					r.add(result(idR, titleR, ref, Pass, "caller B's request ran on its own ("+why+"), while caller A's retry replays", exA, exB))
				default:
					r.add(result(idR, titleR, ref, Warn, "cannot tell a replay from a fresh execution: "+why+"; "+r.decide(), exA, exB, r.probe))
				}
			}
		}
	}

	if !r.on(idV) {
		return
	}
	key2 := newKey()
	before, err1 := r.count(ctx)
	exA2 := r.cl.send(ctx, r.first(key2, r.body(unique())))
	reqB2 := r.first(key2, r.body(unique()))
	reqB2.callerB = true
	exB2 := r.cl.send(ctx, reqB2)
	after, err2 := r.count(ctx)
	if res, bad := r.unfinished(idV, titleV, ref, exA2, exB2); bad {
		r.add(res)
		return
	}
	switch {
	case exB2.status == http.StatusUnprocessableEntity || exB2.status == http.StatusConflict:
		r.add(result(idV, titleV, ref, Fail, fmt.Sprintf("%d: the answer shows that another caller used this key", exB2.status), exA2, exB2))
	case exB2.ok() && exA2.ok():
		obs, why := r.judge(ctx, exA2, exB2, after-before-1, counted(err1, err2))
		switch obs {
		case executedRun:
			r.add(result(idV, titleV, ref, Pass, "caller B's different request under the same key ran normally ("+why+")", exA2, exB2))
		case replayedRun:
			r.add(result(idV, titleV, ref, Fail, "caller B's different request got caller A's answer ("+why+")", exA2, exB2))
		default:
			r.add(result(idV, titleV, ref, Warn, "cannot tell: "+why+"; "+r.decide(), exA2, exB2))
		}
	default:
		r.add(result(idV, titleV, ref, Warn, fmt.Sprintf("callers A and B got %d and %d", exA2.status, exB2.status), exA2, exB2))
	}
}
