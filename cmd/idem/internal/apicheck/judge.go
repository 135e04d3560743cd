// How a retry is judged: replayed, executed, or cannot tell, and why.

package apicheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
)

// seen is what a retry turned out to be.
type seen int

const (
	unknownRun seen = iota
	replayedRun
	executedRun
)

// decide is the sentence a "cannot tell" verdict ends with.
func (r *runner) decide() string {
	if r.cfg.oracle.kind == "id" {
		return "the id does not tell executions apart; an oracle that counts effects would decide it (--oracle count:PATH#POINTER or cmd:COMMAND)"
	}
	return "an effect oracle would decide it (--oracle count:PATH#POINTER, cmd:COMMAND, or id:POINTER for an id that differs per execution)"
}

// judge tells whether retry, a request with first's key, was replayed or
// executed, and why. extra is the number of effects the counting oracle
// saw beyond first's own (when counted).
func (r *runner) judge(ctx context.Context, first, retry *exchange, extra int64, counted bool) (seen, string) {
	switch {
	case counted && extra == 0:
		return replayedRun, "the oracle counted no second effect"
	case counted && extra > 0:
		return executedRun, fmt.Sprintf("the oracle counted %s for it", plural(extra, "effect"))
	case replayed(retry.header):
		return replayedRun, "marked " + markerName(retry.header)
	case !first.ok() || !retry.ok():
		return unknownRun, fmt.Sprintf("answers %d and %d", first.status, retry.status)
	case r.cfg.oracle.identity(first.body) != r.cfg.oracle.identity(retry.body):
		if r.cfg.oracle.kind == "id" {
			return executedRun, "another resource id"
		}
		return executedRun, "another answer"
	case r.distinguishes(ctx):
		what := "answer"
		if r.cfg.oracle.kind == "id" {
			what = "id"
		}
		return replayedRun, "the same " + what + ", while a fresh key with the same body gets another"
	case r.marks:
		return executedRun, "not marked as a replay, though the API marks its replays"
	}
	return unknownRun, "the same answer, not marked as a replay, and a fresh key with the same body gets that answer too"
}

// distinguishes sends, once, ex1's body under a fresh key and reports
// whether its answer differs from ex1's: if it does, every execution
// answers differently, and an identical answer is a replay.
func (r *runner) distinguishes(ctx context.Context) bool {
	if r.probed {
		return r.distinct
	}
	r.probed = true
	r.probe = r.cl.send(ctx, r.first(newKey(), r.body1()))
	r.distinct = r.probe.ok() && r.cfg.oracle.identity(r.probe.body) != r.cfg.oracle.identity(r.ex1.body)
	return r.distinct
}

func (r *runner) body1() string { return r.ex1.req.body }

// retry sends ex1's retry, once, for the checks that need it.
func (r *runner) retry(ctx context.Context) {
	if r.ex2 != nil {
		return
	}
	r.ex2 = r.cl.send(ctx, r.first(r.key, r.body1st))
	var err error
	r.after, err = r.count(ctx)
	r.countErr = errors.Join(r.countErr, err)
	if r.ex2.err == nil {
		counted := r.cfg.oracle.counts() && r.countErr == nil
		r.own, r.ownWhy = r.judge(ctx, r.ex1, r.ex2, r.after-r.before-1, counted)
		if replayed(r.ex2.header) && !replayed(r.ex1.header) {
			r.marks = true
		}
	}
}

// count reads the oracle's count, or 0 for oracles that do not count.
func (r *runner) count(ctx context.Context) (int64, error) {
	if !r.cfg.oracle.counts() {
		return 0, nil
	}
	return r.cfg.oracle.count(ctx, r.cl)
}

// replayed reports whether a response carries a replay marker: Stripe's
// Idempotent-Replayed: true, or a header of that spirit.
func replayed(h http.Header) bool { return markerName(h) != "" }

func markerName(h http.Header) string {
	for name, vs := range h {
		if strings.Contains(strings.ToLower(name), "replay") && len(vs) > 0 && strings.EqualFold(strings.TrimSpace(vs[0]), "true") {
			return name + ": true"
		}
	}
	return ""
}
