// The replay checks: replay-body, replay-effect, replay-headers,
// replay-marker, replay-cookie.

package apicheck

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
)

// replay checks the retry of the first request.
func (r *runner) replay(ctx context.Context) {
	if !r.anyOn("replay-body", "replay-effect", "replay-headers", "replay-marker", "replay-cookie") {
		return
	}
	r.retry(ctx)
	ex1, ex2 := r.ex1, r.ex2
	const ref = refDraft + "; " + refStripe
	type check struct{ id, title, ref string }
	checks := []check{
		{"replay-body", "a retry gets the same status and body", ref},
		{"replay-effect", "a retry has no second effect", refSeed},
		{"replay-headers", "a retry gets the headers that matter", ref},
		{"replay-marker", "a replay is marked as one", refStripe},
		{"replay-cookie", "a replay carries no Set-Cookie", refSeed},
	}
	if _, bad := r.unfinished("", "", "", ex2); bad {
		for _, c := range checks {
			res, _ := r.unfinished(c.id, c.title, c.ref, ex1, ex2)
			r.add(res)
		}
		return
	}
	if r.on("replay-body") || r.on("replay-headers") || r.on("replay-cookie") {
		r.distinguishes(ctx) // the evidence of a "cannot tell"
	}
	own, why := r.own, r.ownWhy
	probe := r.probe

	c := checks[0]
	switch {
	case ex2.status != ex1.status || !bytes.Equal(ex2.body, ex1.body):
		r.add(result(c.id, c.title, c.ref, Fail,
			fmt.Sprintf("first %d (%d bytes), retry %d (%d bytes): the retry is not the first answer", ex1.status, len(ex1.body), ex2.status, len(ex2.body)), ex1, ex2))
	case own == replayedRun:
		r.add(result(c.id, c.title, c.ref, Pass, "byte-identical replay ("+why+")", ex1, ex2))
	case own == executedRun:
		r.add(result(c.id, c.title, c.ref, Fail, "the same bytes, but from a second execution ("+why+"), not a replay", ex1, ex2))
	default:
		r.add(result(c.id, c.title, c.ref, Warn, "cannot tell: "+why+"; "+r.decide(), ex1, ex2, probe))
	}

	c = checks[1]
	switch {
	case r.cfg.oracle.kind == "":
		r.add(skipped(c.id, c.title, c.ref, "--oracle", "no effect oracle: name one (--oracle id:POINTER, count:PATH#POINTER or cmd:COMMAND)"))
	case r.cfg.oracle.counts() && r.countErr != nil:
		r.add(result(c.id, c.title, c.ref, Warn, "oracle failed: "+r.countErr.Error()))
	case r.cfg.oracle.counts():
		st, d := Pass, fmt.Sprintf("one effect (the oracle counted %d before, %d after)", r.before, r.after)
		if r.after-r.before != 1 {
			st, d = Fail, fmt.Sprintf("%d effects for one key (the oracle counted %d before, %d after)", r.after-r.before, r.before, r.after)
		}
		r.add(result(c.id, c.title, c.ref, st, d, ex1, ex2))
	default: // id
		a, b := r.cfg.oracle.identity(ex1.body), r.cfg.oracle.identity(ex2.body)
		switch {
		case a != b:
			r.add(result(c.id, c.title, c.ref, Fail, fmt.Sprintf("two resources: %s and %s", a, b), ex1, ex2))
		case r.distinguishes(ctx):
			r.add(result(c.id, c.title, c.ref, Pass, "same resource id "+a+" (a fresh key with the same body gets another)", ex1, ex2, r.probe))
		default:
			r.add(result(c.id, c.title, c.ref, Warn, "cannot tell: same resource id "+a+", but a fresh key with the same body gets it too; "+r.decide(), ex1, ex2, r.probe))
		}
	}

	c = checks[2]
	var diff []string
	for _, h := range []string{"Content-Type", "Location", "Content-Location"} {
		if ex1.header.Get(h) != ex2.header.Get(h) {
			diff = append(diff, fmt.Sprintf("%s %q → %q", h, ex1.header.Get(h), ex2.header.Get(h)))
		}
	}
	switch {
	case len(diff) > 0 && own == executedRun:
		r.add(result(c.id, c.title, c.ref, Fail, strings.Join(diff, "; ")+" (the retry was executed: "+why+")", ex1, ex2))
	case len(diff) > 0:
		r.add(result(c.id, c.title, c.ref, Fail, strings.Join(diff, "; "), ex1, ex2))
	case own == replayedRun:
		r.add(result(c.id, c.title, c.ref, Pass, "Content-Type, Location and Content-Location match ("+why+")", ex1, ex2))
	case own == executedRun:
		r.add(result(c.id, c.title, c.ref, Warn, "no replay to look at: the retry was executed ("+why+")", ex1, ex2))
	default:
		r.add(result(c.id, c.title, c.ref, Warn, "the headers match, but cannot tell a replay from an execution: "+why+"; "+r.decide(), ex1, ex2, probe))
	}

	c = checks[3]
	switch {
	case replayed(ex1.header):
		r.add(result(c.id, c.title, c.ref, Fail, "the first response is marked as a replay", ex1, ex2))
	case replayed(ex2.header):
		r.add(result(c.id, c.title, c.ref, Pass, "the retry is marked ("+markerName(ex2.header)+")", ex1, ex2))
	case own == executedRun:
		r.add(result(c.id, c.title, c.ref, Warn, "no replay to mark: the retry was executed ("+why+")", ex1, ex2))
	default:
		r.add(result(c.id, c.title, c.ref, Warn, "no replay marker (e.g. Idempotent-Replayed: true): clients cannot tell a replay from a fresh execution", ex1, ex2))
	}

	c = checks[4]
	cookie1, cookie2 := ex1.header.Values("Set-Cookie"), ex2.header.Values("Set-Cookie")
	sameCookie := len(cookie2) > 0 && slices.Equal(cookie1, cookie2)
	switch {
	case len(cookie1) == 0:
		r.add(skipped(c.id, c.title, c.ref, "--path", "the first response set no cookie: nothing to check (an endpoint that sets one, --path, would be checked)"))
	case own == executedRun:
		r.add(result(c.id, c.title, c.ref, Warn, "no replay to look at: the retry was executed ("+why+"), and its Set-Cookie is its own", ex1, ex2))
	case own == unknownRun && len(cookie2) > 0:
		r.add(result(c.id, c.title, c.ref, Warn, "the retry sets a cookie, but cannot tell whether it was a replay: "+why+"; "+r.decide(), ex1, ex2, probe))
	case own == unknownRun:
		r.add(result(c.id, c.title, c.ref, Warn, "no cookie on the retry, but cannot tell whether it was a replay: "+why+"; "+r.decide(), ex1, ex2, probe))
	case sameCookie:
		r.add(result(c.id, c.title, c.ref, Fail, "the replay ("+why+") repeats the first answer's Set-Cookie: a stored session cookie reaches whoever retries with the key", ex1, ex2))
	case len(cookie2) > 0:
		r.add(result(c.id, c.title, c.ref, Warn, "the replay ("+why+") sets a cookie, though not the first answer's", ex1, ex2))
	default:
		r.add(result(c.id, c.title, c.ref, Pass, "the first response's cookie is not replayed ("+why+")", ex1, ex2))
	}
}
