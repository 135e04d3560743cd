// The concurrency checks: concurrency (a burst of first requests) and
// in-flight (a duplicate during the first request).

package apicheck

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

func (r *runner) concurrency(ctx context.Context) {
	const id = "concurrency"
	if !r.on(id) {
		return
	}
	n := r.cfg.Concurrency
	title := fmt.Sprintf("%d concurrent first requests with one key have one effect", n)
	key, body := newKey(), r.body(unique())
	before, err1 := r.count(ctx)
	if err := r.cl.reserve(ctx, n); err != nil {
		if errors.Is(err, errBudget) {
			r.add(skipped(id, title, refSeed, "--max-requests", fmt.Sprintf("the request budget (--max-requests) has no room for %d requests", n)))
		} else {
			r.add(result(id, title, refSeed, Warn, "could not complete the check: "+err.Error()))
		}
		return
	}
	exs := make([]*exchange, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range exs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			req := r.first(key, body)
			req.prepaid = true
			exs[i] = r.cl.send(ctx, req)
		}()
	}
	close(start)
	wg.Wait()
	after, err2 := r.count(ctx)
	if res, bad := r.unfinished(id, title, refSeed, exs...); bad {
		r.add(res)
		return
	}
	ids := map[string]int{}
	statuses := map[int]int{}
	unmarked := 0
	for _, ex := range exs {
		statuses[ex.status]++
		if ex.ok() {
			ids[r.cfg.oracle.identity(ex.body)]++
			if !replayed(ex.header) {
				unmarked++
			}
		}
	}
	summary := statusSummary(statuses)
	switch {
	case r.cfg.oracle.counts() && (err1 != nil || err2 != nil):
		r.add(result(id, title, refSeed, Warn, "oracle failed: "+errors.Join(err1, err2).Error(), exs...))
	case r.cfg.oracle.counts() && after-before != 1:
		r.add(result(id, title, refSeed, Fail, fmt.Sprintf("%d effects (answers: %s)", after-before, summary), exs...))
	case r.cfg.oracle.counts():
		r.add(result(id, title, refSeed, Pass, "one effect (counted by the oracle); answers: "+summary, exs...))
	case len(ids) > 1:
		r.add(result(id, title, refSeed, Fail, fmt.Sprintf("%d different successful answers (%s): the key was executed more than once", len(ids), summary), exs...))
	case len(ids) == 0:
		r.add(result(id, title, refSeed, Fail, "no request succeeded ("+summary+")", exs...))
	case unmarked <= 1:
		r.add(result(id, title, refSeed, Pass, "one execution: the other answers were marked replays or refused; answers: "+summary, exs...))
	case r.distinguishes(ctx):
		r.add(result(id, title, refSeed, Pass, "one answer, while a fresh key with the same body gets another: one execution; answers: "+summary, exs...))
	default:
		r.add(result(id, title, refSeed, Warn, fmt.Sprintf("cannot tell: %d identical unmarked answers, and a fresh key with the same body gets that answer too; %s; answers: %s", unmarked, r.decide(), summary), append(exs, r.probe)...))
	}
}

func (r *runner) inFlight(ctx context.Context) {
	const id, title = "in-flight", "a duplicate during the first request gets 409 with Retry-After, or waits"
	const ref = refDraft
	if !r.on(id) {
		return
	}
	if r.cfg.SlowPath == "" {
		r.add(skipped(id, title, ref, "--slow-path", "name a slow variant of the endpoint (--slow-path)"))
		return
	}
	key, body := newKey(), r.body(unique())
	req := request{method: r.cfg.Method, path: r.cfg.SlowPath, key: key, body: body}
	before, err1 := r.count(ctx)
	done := make(chan *exchange, 1)
	go func() { done <- r.cl.send(ctx, req) }()
	time.Sleep(300 * time.Millisecond)
	ex2 := r.cl.send(ctx, req)
	ex1 := <-done
	after, err2 := r.count(ctx)
	if res, bad := r.unfinished(id, title, ref, ex1, ex2); bad {
		r.add(res)
		return
	}
	switch {
	case ex1.elapsed < 300*time.Millisecond:
		r.add(result(id, title, ref, Warn, fmt.Sprintf("the slow variant answered in %v: make it slower than 1s", ex1.elapsed.Round(time.Millisecond)), ex1, ex2))
	case ex2.status == http.StatusConflict && ex2.header.Get("Retry-After") != "":
		r.add(result(id, title, ref, Pass, "409 with Retry-After: "+ex2.header.Get("Retry-After"), ex1, ex2))
	case ex2.status == http.StatusConflict:
		r.add(result(id, title, ref, Warn, "409 without Retry-After", ex1, ex2))
	case ex2.ok() && ex1.ok():
		obs, why := r.judge(ctx, ex1, ex2, after-before-1, r.cfg.oracle.counts() && err1 == nil && err2 == nil)
		switch obs {
		case replayedRun:
			r.add(result(id, title, ref, Pass, "the duplicate waited and got the first answer ("+why+")", ex1, ex2))
		case executedRun:
			r.add(result(id, title, ref, Fail, "the duplicate ran while the first was running ("+why+")", ex1, ex2))
		default:
			r.add(result(id, title, ref, Warn, "cannot tell: "+why+"; "+r.decide(), ex1, ex2, r.probe))
		}
	default:
		r.add(result(id, title, ref, Warn, fmt.Sprintf("answers %d and %d", ex1.status, ex2.status), ex1, ex2))
	}
}
