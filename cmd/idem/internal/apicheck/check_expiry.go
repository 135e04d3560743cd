// The expiry check.

package apicheck

import (
	"context"
	"fmt"
	"time"
)

func (r *runner) expiry(ctx context.Context) {
	const id, title = "expiry", "the API publishes how long keys are kept, and forgets them after it"
	if !r.on(id) {
		return
	}
	if r.cfg.retention == 0 {
		r.add(result(id, title, refDraft, Warn, "no retention declared (--retention): the draft asks the API to publish its expiry policy"))
		return
	}
	if r.cfg.retention > time.Duration(r.cfg.MaxWait) {
		r.add(skipped(id, title, refDraft, "--max-wait", fmt.Sprintf("declared %v, not waited out: longer than --max-wait %v", r.cfg.retention, time.Duration(r.cfg.MaxWait))))
		return
	}
	key, body := newKey(), r.body(unique())
	ex1 := r.cl.send(ctx, r.first(key, body))
	t := time.NewTimer(r.cfg.retention + time.Second)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return
	}
	before, err1 := r.count(ctx)
	ex2 := r.cl.send(ctx, r.first(key, body))
	after, err2 := r.count(ctx)
	if res, bad := r.unfinished(id, title, refDraft, ex1, ex2); bad {
		r.add(res)
		return
	}
	// Counted around the retry alone: one effect means it ran afresh.
	obs, why := r.judge(ctx, ex1, ex2, after-before, r.cfg.oracle.counts() && err1 == nil && err2 == nil)
	switch obs {
	case executedRun:
		r.add(result(id, title, refDraft, Pass, fmt.Sprintf("declared %v; after it the key ran afresh (%s)", r.cfg.retention, why), ex1, ex2))
	case replayedRun:
		r.add(result(id, title, refDraft, Warn, fmt.Sprintf("declared %v, but the key still replays after it (%s)", r.cfg.retention, why), ex1, ex2))
	default:
		r.add(result(id, title, refDraft, Warn, "cannot tell whether the key ran afresh: "+why+"; "+r.decide(), ex1, ex2))
	}
}
