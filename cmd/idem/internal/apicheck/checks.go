package apicheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// Status is a check's verdict.
type Status string

// Verdicts.
const (
	Pass Status = "PASS"
	Warn Status = "WARN"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// References the checks name.
const (
	refDraft  = "IETF draft-ietf-httpapi-idempotency-key-header"
	refStripe = "Stripe API reference, Idempotent requests"
	refSeed   = "idem's seed: one key = one business action, decided atomically"
)

// Result is one check's outcome with its evidence.
type Result struct {
	ID        string     `json:"id"`
	Title     string     `json:"title"`
	Reference string     `json:"reference"`
	Status    Status     `json:"status"`
	Detail    string     `json:"detail"`
	Evidence  []Evidence `json:"evidence,omitempty"`
}

// Evidence is one request the check sent and the answer it got.
type Evidence struct {
	Request string            `json:"request"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	Error   string            `json:"error,omitempty"`
	Millis  int64             `json:"ms"`
}

// Report is the outcome of a run.
type Report struct {
	Target   string         `json:"target"`
	Endpoint string         `json:"endpoint"`
	Oracle   string         `json:"oracle"`
	Started  time.Time      `json:"started"`
	Millis   int64          `json:"ms"`
	Requests int64          `json:"requests"`
	Counts   map[Status]int `json:"counts"`
	Results  []Result       `json:"results"`
}

// Failed reports whether any check failed.
func (r *Report) Failed() bool { return r.Counts[Fail] > 0 }

// ErrEndpoint is returned by Run when the endpoint does not answer a
// well-formed first request with a 2xx: the configuration is wrong, and no
// check would mean anything.
var ErrEndpoint = errors.New("the endpoint did not accept a well-formed first request")

// Run checks the API that cfg describes and returns the report. progress,
// when not nil, is called with each result as soon as it is known.
func Run(ctx context.Context, cfg Config, progress func(Result)) (*Report, error) {
	c, err := cfg.normalize()
	if err != nil {
		return nil, err
	}
	cl := newClient(c)
	defer cl.close()
	r := &runner{cfg: c, cl: cl, progress: progress}
	rep := &Report{
		Target:   c.base.Redacted(),
		Endpoint: c.Method + " " + c.Path,
		Oracle:   c.oracle.String(),
		Started:  time.Now(),
		Counts:   map[Status]int{},
	}
	err = r.run(ctx)
	rep.Results = r.results
	for _, res := range r.results {
		rep.Counts[res.Status]++
	}
	rep.Requests = cl.sent.Load()
	rep.Millis = time.Since(rep.Started).Milliseconds()
	return rep, err
}

type runner struct {
	cfg      *Config
	cl       *client
	progress func(Result)
	results  []Result
}

func (r *runner) add(res Result) {
	r.results = append(r.results, res)
	if r.progress != nil {
		r.progress(res)
	}
}

func (r *runner) body(u string) string { return strings.ReplaceAll(r.cfg.Body, Placeholder, u) }

func (r *runner) first(key string, body string) request {
	return request{method: r.cfg.Method, path: r.cfg.Path, key: key, body: body}
}

func (r *runner) run(ctx context.Context) error {
	if err := r.replay(ctx); err != nil {
		return err
	}
	for _, step := range []func(context.Context){
		r.keyRequired, r.keySyntax, r.keyForms, r.concurrency, r.inFlight,
		r.scopes, r.failures, r.expiry,
	} {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		step(ctx)
	}
	return ctx.Err()
}

// result builds a Result from exchanges.
func result(id, title, ref string, st Status, detail string, exs ...*exchange) Result {
	res := Result{ID: id, Title: title, Reference: ref, Status: st, Detail: detail}
	for _, ex := range exs {
		if ex != nil {
			res.Evidence = append(res.Evidence, evidence(ex))
		}
	}
	return res
}

// budgetOrError turns a transport failure into a verdict: SKIP when the
// budget ran out, WARN otherwise (the check could not be made).
func budgetOrError(id, title, ref string, exs ...*exchange) (Result, bool) {
	for _, ex := range exs {
		if ex != nil && ex.err != nil {
			st := Warn
			if errors.Is(ex.err, errBudget) {
				st = Skip
			}
			return result(id, title, ref, st, "could not complete the check: "+ex.err.Error(), exs...), true
		}
	}
	return Result{}, false
}

// replay sends a first request and its retry, then checks the replay, and
// the mismatch variants against the completed key.
func (r *runner) replay(ctx context.Context) error {
	u := unique()
	key, body := newKey(), r.body(u)
	before, countErr := r.count(ctx)
	ex1 := r.cl.send(ctx, r.first(key, body))
	if ex1.err != nil || !ex1.ok() {
		res := result("endpoint", "a well-formed first request succeeds", refDraft, Fail,
			"the endpoint must answer 2xx to a well-formed keyed request; check the URL, --path, --body and --header", ex1)
		r.add(res)
		return fmt.Errorf("%w (%s)", ErrEndpoint, describe(ex1))
	}
	ex2 := r.cl.send(ctx, r.first(key, body))
	after, countErr2 := r.count(ctx)

	const ref = refDraft + "; " + refStripe
	if res, bad := budgetOrError("replay-body", "a retry gets the same status and body", ref, ex1, ex2); bad {
		r.add(res)
		return nil
	}
	if ex2.status == ex1.status && bytes.Equal(ex2.body, ex1.body) {
		r.add(result("replay-body", "a retry gets the same status and body", ref, Pass, "byte-identical replay", ex1, ex2))
	} else {
		r.add(result("replay-body", "a retry gets the same status and body", ref, Fail,
			fmt.Sprintf("first %d (%d bytes), retry %d (%d bytes): the retry is not the first answer", ex1.status, len(ex1.body), ex2.status, len(ex2.body)), ex1, ex2))
	}

	switch {
	case r.cfg.oracle.counts() && (countErr != nil || countErr2 != nil):
		r.add(result("replay-effect", "a retry has no second effect", refSeed, Warn, "oracle failed: "+errors.Join(countErr, countErr2).Error()))
	case r.cfg.oracle.counts():
		st, d := Pass, "one effect"
		if after-before != 1 {
			st, d = Fail, fmt.Sprintf("%d effects for one key (the oracle counted %d before, %d after)", after-before, before, after)
		}
		r.add(result("replay-effect", "a retry has no second effect", refSeed, st, d, ex1, ex2))
	case r.cfg.oracle.kind == "id":
		a, b := r.cfg.oracle.identity(ex1.body), r.cfg.oracle.identity(ex2.body)
		st, d := Pass, "same resource id "+a
		if a != b {
			st, d = Fail, fmt.Sprintf("two resources: %s and %s", a, b)
		}
		r.add(result("replay-effect", "a retry has no second effect", refSeed, st, d, ex1, ex2))
	}

	hdr := []string{"Content-Type", "Location", "Content-Location"}
	var diff []string
	for _, h := range hdr {
		if ex1.header.Get(h) != ex2.header.Get(h) {
			diff = append(diff, fmt.Sprintf("%s %q → %q", h, ex1.header.Get(h), ex2.header.Get(h)))
		}
	}
	if len(diff) == 0 {
		r.add(result("replay-headers", "a retry gets the headers that matter", ref, Pass, "Content-Type, Location and Content-Location match", ex1, ex2))
	} else {
		r.add(result("replay-headers", "a retry gets the headers that matter", ref, Fail, strings.Join(diff, "; "), ex1, ex2))
	}

	switch {
	case replayed(ex1.header):
		r.add(result("replay-marker", "a replay is marked as one", refStripe, Fail, "the first response is marked as a replay", ex1, ex2))
	case replayed(ex2.header):
		r.add(result("replay-marker", "a replay is marked as one", refStripe, Pass, "the retry is marked ("+markerName(ex2.header)+")", ex1, ex2))
	default:
		r.add(result("replay-marker", "a replay is marked as one", refStripe, Warn, "no replay marker (e.g. Idempotent-Replayed: true): clients cannot tell a replay from a fresh execution", ex1, ex2))
	}

	switch {
	case len(ex1.header.Values("Set-Cookie")) == 0:
		r.add(result("replay-cookie", "a replay carries no Set-Cookie", refSeed, Skip, "the first response set no cookie", ex1))
	case len(ex2.header.Values("Set-Cookie")) > 0:
		r.add(result("replay-cookie", "a replay carries no Set-Cookie", refSeed, Fail,
			"the replay sets a cookie: a stored session cookie reaches whoever retries with the key", ex1, ex2))
	default:
		r.add(result("replay-cookie", "a replay carries no Set-Cookie", refSeed, Pass, "the first response's cookie is not replayed", ex1, ex2))
	}

	r.mismatch(ctx, key, ex1)
	return nil
}

// mismatch reuses a completed key for other requests.
func (r *runner) mismatch(ctx context.Context, key string, first *exchange) {
	path := r.cfg.Path
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	method := "PATCH" // protected by most APIs, like POST
	if r.cfg.Method == "PATCH" {
		method = "POST"
	}
	body := first.req.body
	variants := []struct {
		id, what string
		req      request
	}{
		{"mismatch-body", "another body", request{method: r.cfg.Method, path: path, key: key, body: r.body(unique())}},
		{"mismatch-query", "another query", request{method: r.cfg.Method, path: path + sep + "idemcheck=1", key: key, body: body}},
		{"mismatch-path", "another path", request{method: r.cfg.Method, path: strings.TrimSuffix(strings.SplitN(path, "?", 2)[0], "/") + "/idemcheck", key: key, body: body}},
		{"mismatch-method", "another method", request{method: method, path: path, key: key, body: body}},
	}
	for _, v := range variants {
		if v.id == "mismatch-body" && !strings.Contains(r.cfg.Body, Placeholder) {
			r.add(result(v.id, "the same key with "+v.what+" is refused with 422", refDraft, Skip, "the body template has no "+Placeholder+" to vary"))
			continue
		}
		ex := r.cl.send(ctx, v.req)
		title := "the same key with " + v.what + " is refused with 422"
		if res, bad := budgetOrError(v.id, title, refDraft, first, ex); bad {
			r.add(res)
			continue
		}
		var st Status
		var d string
		switch {
		case ex.status == http.StatusUnprocessableEntity:
			st, d = Pass, "422"
		case ex.ok() && ex.status == first.status && bytes.Equal(ex.body, first.body):
			st, d = Fail, "the first request's answer was replayed for a different request"
		case ex.ok():
			st, d = Fail, fmt.Sprintf("a different request ran under a used key (%d)", ex.status)
		case ex.status == http.StatusBadRequest || ex.status == http.StatusConflict:
			st, d = Warn, fmt.Sprintf("refused with %d; the draft asks for 422", ex.status)
		case ex.status == http.StatusNotFound || ex.status == http.StatusMethodNotAllowed:
			st, d = Warn, fmt.Sprintf("inconclusive: %d before any key check", ex.status)
		default:
			st, d = Warn, fmt.Sprintf("answered %d", ex.status)
		}
		r.add(result(v.id, title, refDraft, st, d, first, ex))
	}
}

func (r *runner) keyRequired(ctx context.Context) {
	const id, title = "key-required", "a request without a key is refused"
	if !r.cfg.RequireKey {
		r.add(result(id, title, refDraft, Skip, "the key is not declared required (--require-key)"))
		return
	}
	ex := r.cl.send(ctx, r.first("", r.body(unique())))
	if res, bad := budgetOrError(id, title, refDraft, ex); bad {
		r.add(res)
		return
	}
	switch {
	case ex.status == http.StatusBadRequest:
		r.add(result(id, title, refDraft, Pass, "400", ex))
	case ex.status >= 400 && ex.status < 500:
		r.add(result(id, title, refDraft, Pass, fmt.Sprintf("%d (the draft suggests 400)", ex.status), ex))
	case ex.ok():
		r.add(result(id, title, refDraft, Fail, "executed without a key", ex))
	default:
		r.add(result(id, title, refDraft, Warn, fmt.Sprintf("answered %d", ex.status), ex))
	}
}

func (r *runner) keySyntax(ctx context.Context) {
	long := `"` + strings.Repeat("k", 256) + `"`
	cases := []struct {
		id, title string
		lines     []string
		accept    Status // verdict when the request is executed
	}{
		{"key-empty", "an empty key is refused with 4xx", []string{`""`}, Fail},
		{"key-too-long", "a 256-character key is refused with 4xx", []string{long}, Warn},
		{"key-control", "a key with a control character is refused with 4xx", []string{"\"ab\x01" + unique() + "\""}, Fail},
		{"key-two-lines", "two key header lines are refused with 4xx", []string{newKey(), newKey()}, Fail},
	}
	for _, c := range cases {
		title := c.title
		req := r.first(fmt.Sprintf("%q", strings.Join(c.lines, "\n")), r.body(unique()))
		ex := r.cl.sendRaw(ctx, req, c.lines)
		if res, bad := budgetOrError(c.id, title, refDraft, ex); bad {
			r.add(res)
			continue
		}
		switch {
		case ex.status >= 400 && ex.status < 500:
			r.add(result(c.id, title, refDraft, Pass, fmt.Sprintf("%d", ex.status), ex))
		case ex.ok():
			d := "executed"
			if c.id == "key-too-long" {
				d = "accepted; Stripe and most APIs cap keys at 255 characters"
			}
			r.add(result(c.id, title, refDraft, c.accept, d, ex))
		default:
			r.add(result(c.id, title, refDraft, Warn, fmt.Sprintf("answered %d", ex.status), ex))
		}
	}
}

func (r *runner) keyForms(ctx context.Context) {
	const id, title = "key-forms", `the quoted ("k") and bare (k) forms are one key`
	bare := "idemcheck-" + unique()
	body := r.body(unique())
	ex1 := r.cl.send(ctx, r.first(`"`+bare+`"`, body))
	ex2 := r.cl.send(ctx, r.first(bare, body))
	if res, bad := budgetOrError(id, title, refDraft, ex1, ex2); bad {
		r.add(res)
		return
	}
	switch {
	case ex1.ok() && ex2.status == ex1.status && bytes.Equal(ex1.body, ex2.body):
		r.add(result(id, title, refDraft, Pass, "the bare form replays the quoted one", ex1, ex2))
	case ex1.ok() && ex2.ok():
		r.add(result(id, title, refDraft, Warn, "two different answers: a client that switches forms executes twice", ex1, ex2))
	default:
		r.add(result(id, title, refDraft, Warn, fmt.Sprintf("answers %d and %d", ex1.status, ex2.status), ex1, ex2))
	}
}

func (r *runner) concurrency(ctx context.Context) {
	n := r.cfg.Concurrency
	id, title := "concurrency", fmt.Sprintf("%d concurrent first requests with one key have one effect", n)
	key, body := newKey(), r.body(unique())
	before, err1 := r.count(ctx)
	if err := r.cl.reserve(ctx, n); err != nil {
		st := Warn
		if errors.Is(err, errBudget) {
			st = Skip
		}
		r.add(result(id, title, refSeed, st, "could not complete the check: "+err.Error()))
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
	if res, bad := budgetOrError(id, title, refSeed, exs...); bad {
		r.add(res)
		return
	}
	ids := map[string]int{}
	statuses := map[int]int{}
	for _, ex := range exs {
		statuses[ex.status]++
		if ex.ok() {
			ids[r.cfg.oracle.identity(ex.body)]++
		}
	}
	summary := statusSummary(statuses)
	switch {
	case r.cfg.oracle.counts() && (err1 != nil || err2 != nil):
		r.add(result(id, title, refSeed, Warn, "oracle failed: "+errors.Join(err1, err2).Error(), exs...))
	case r.cfg.oracle.counts() && after-before != 1:
		r.add(result(id, title, refSeed, Fail, fmt.Sprintf("%d effects (answers: %s)", after-before, summary), exs...))
	case len(ids) > 1:
		r.add(result(id, title, refSeed, Fail, fmt.Sprintf("%d different successful answers (%s): the key was executed more than once", len(ids), summary), exs...))
	case len(ids) == 0:
		r.add(result(id, title, refSeed, Fail, "no request succeeded ("+summary+")", exs...))
	default:
		r.add(result(id, title, refSeed, Pass, "one effect; answers: "+summary, exs...))
	}
}

func (r *runner) inFlight(ctx context.Context) {
	const id, title = "in-flight", "a duplicate during the first request gets 409 with Retry-After, or waits"
	const ref = refDraft
	if r.cfg.SlowPath == "" {
		r.add(result(id, title, ref, Skip, "name a slow variant of the endpoint (--slow-path)"))
		return
	}
	key, body := newKey(), r.body(unique())
	req := request{method: r.cfg.Method, path: r.cfg.SlowPath, key: key, body: body}
	done := make(chan *exchange, 1)
	go func() { done <- r.cl.send(ctx, req) }()
	time.Sleep(300 * time.Millisecond)
	ex2 := r.cl.send(ctx, req)
	ex1 := <-done
	if res, bad := budgetOrError(id, title, ref, ex1, ex2); bad {
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
	case ex2.ok() && ex1.ok() && r.cfg.oracle.identity(ex1.body) == r.cfg.oracle.identity(ex2.body):
		r.add(result(id, title, ref, Pass, "the duplicate waited and got the first answer", ex1, ex2))
	case ex2.ok() && ex1.ok():
		r.add(result(id, title, ref, Fail, "the duplicate ran while the first was running", ex1, ex2))
	default:
		r.add(result(id, title, ref, Warn, fmt.Sprintf("answers %d and %d", ex1.status, ex2.status), ex1, ex2))
	}
}

func (r *runner) scopes(ctx context.Context) {
	const ref = refDraft + "; " + refSeed
	const idR, titleR = "scope-replay", "one caller's key never replays another caller's response"
	const idV, titleV = "scope-reveal", "a refusal never reveals another caller's key"
	if len(r.cfg.other) == 0 {
		r.add(result(idR, titleR, ref, Skip, "give a second caller's credentials (--other-header)"))
		r.add(result(idV, titleV, ref, Skip, "give a second caller's credentials (--other-header)"))
		return
	}
	key, body := newKey(), r.body(unique())
	before, err1 := r.count(ctx)
	exA := r.cl.send(ctx, r.first(key, body))
	reqB := r.first(key, body)
	reqB.callerB = true
	exB := r.cl.send(ctx, reqB)
	after, err2 := r.count(ctx)
	if res, bad := budgetOrError(idR, titleR, ref, exA, exB); bad {
		r.add(res)
	} else {
		same := exB.ok() && exA.ok() && r.cfg.oracle.identity(exA.body) == r.cfg.oracle.identity(exB.body)
		switch {
		case !exA.ok():
			r.add(result(idR, titleR, ref, Warn, fmt.Sprintf("caller A got %d", exA.status), exA, exB))
		case exB.status == http.StatusConflict || exB.status == http.StatusUnprocessableEntity:
			r.add(result(idR, titleR, ref, Fail, fmt.Sprintf("caller B was refused with %d because of caller A's key", exB.status), exA, exB))
		case !exB.ok():
			r.add(result(idR, titleR, ref, Warn, fmt.Sprintf("caller B got %d: check --other-header", exB.status), exA, exB))
		case r.cfg.oracle.counts() && err1 == nil && err2 == nil && after-before == 1:
			r.add(result(idR, titleR, ref, Fail, "caller B's request had no effect: it got caller A's answer", exA, exB))
		case replayed(exB.header):
			r.add(result(idR, titleR, ref, Fail, "caller B got a replay of caller A's response", exA, exB))
		case same && !r.cfg.oracle.counts() && r.cfg.oracle.kind == "":
			r.add(result(idR, titleR, ref, Warn, "identical answers and no replay marker: cannot tell a replay from a fresh execution (use --oracle)", exA, exB))
		case same:
			r.add(result(idR, titleR, ref, Fail, "caller B got caller A's resource", exA, exB))
		default:
			r.add(result(idR, titleR, ref, Pass, "caller B's request ran on its own", exA, exB))
		}
	}

	key2 := newKey()
	exA2 := r.cl.send(ctx, r.first(key2, r.body(unique())))
	reqB2 := r.first(key2, r.body(unique()))
	reqB2.callerB = true
	exB2 := r.cl.send(ctx, reqB2)
	if res, bad := budgetOrError(idV, titleV, ref, exA2, exB2); bad {
		r.add(res)
		return
	}
	switch {
	case exB2.ok():
		r.add(result(idV, titleV, ref, Pass, "caller B's different request under the same key ran normally", exA2, exB2))
	case exB2.status == http.StatusUnprocessableEntity || exB2.status == http.StatusConflict:
		r.add(result(idV, titleV, ref, Fail, fmt.Sprintf("%d: the answer shows that another caller used this key", exB2.status), exA2, exB2))
	default:
		r.add(result(idV, titleV, ref, Warn, fmt.Sprintf("caller B got %d", exB2.status), exA2, exB2))
	}
}

func (r *runner) failures(ctx context.Context) {
	const id = "failure-policy"
	title, ref := "a 5xx is not stored: the retry runs again", refDraft
	if r.cfg.StoresFailures {
		title, ref = "a 5xx is stored and replayed (declared)", refStripe
	}
	if r.cfg.FailPath == "" {
		r.add(result(id, title, ref, Skip, "name a failing variant of the endpoint (--fail-path)"))
		return
	}
	key, body := newKey(), r.body(unique())
	req := request{method: r.cfg.Method, path: r.cfg.FailPath, key: key, body: body}
	before, err1 := r.count(ctx)
	ex1 := r.cl.send(ctx, req)
	ex2 := r.cl.send(ctx, req)
	after, err2 := r.count(ctx)
	if res, bad := budgetOrError(id, title, ref, ex1, ex2); bad {
		r.add(res)
		return
	}
	if ex1.status < 500 {
		r.add(result(id, title, ref, Warn, fmt.Sprintf("the failing variant answered %d, not 5xx", ex1.status), ex1, ex2))
		return
	}
	var stored, known bool
	switch {
	case r.cfg.oracle.counts() && err1 == nil && err2 == nil && after-before > 0:
		stored, known = after-before == 1, true
	case replayed(ex2.header):
		stored, known = true, true
	case ex2.status != ex1.status || !bytes.Equal(ex1.body, ex2.body):
		stored, known = false, true
	case replayMarkerSeen(r.results):
		stored, known = false, true // the API marks replays, and this one is not marked
	}
	switch {
	case !known:
		r.add(result(id, title, ref, Warn, "identical failures and no replay marker: cannot tell whether the retry ran", ex1, ex2))
	case stored == r.cfg.StoresFailures && stored:
		r.add(result(id, title, ref, Pass, "the failure was stored and replayed", ex1, ex2))
	case stored == r.cfg.StoresFailures:
		r.add(result(id, title, ref, Pass, "the retry ran again", ex1, ex2))
	case stored:
		r.add(result(id, title, ref, Fail, "the 5xx was stored: every retry with this key fails, though the next attempt might succeed", ex1, ex2))
	default:
		r.add(result(id, title, ref, Fail, "the 5xx was not stored, though the API declares that it stores failures", ex1, ex2))
	}
}

func (r *runner) expiry(ctx context.Context) {
	const id, title = "expiry", "the API publishes how long keys are kept"
	if r.cfg.retention == 0 {
		r.add(result(id, title, refDraft, Warn, "no retention declared (--retention): the draft asks the API to publish its expiry policy"))
		return
	}
	if r.cfg.retention > time.Duration(r.cfg.MaxWait) {
		r.add(result(id, title, refDraft, Pass, fmt.Sprintf("declared %v (not waited out: longer than --max-wait %v)", r.cfg.retention, time.Duration(r.cfg.MaxWait))))
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
	ex2 := r.cl.send(ctx, r.first(key, body))
	if res, bad := budgetOrError(id, title, refDraft, ex1, ex2); bad {
		r.add(res)
		return
	}
	if ex2.ok() && !replayed(ex2.header) && r.cfg.oracle.identity(ex1.body) != r.cfg.oracle.identity(ex2.body) {
		r.add(result(id, title, refDraft, Pass, fmt.Sprintf("declared %v; after it the key ran afresh", r.cfg.retention), ex1, ex2))
		return
	}
	r.add(result(id, title, refDraft, Warn, fmt.Sprintf("declared %v, but the key still replays after it", r.cfg.retention), ex1, ex2))
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

func replayMarkerSeen(rs []Result) bool {
	for _, r := range rs {
		if r.ID == "replay-marker" && r.Status == Pass {
			return true
		}
	}
	return false
}

func statusSummary(m map[int]int) string {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%d×%d", m[k], k)
	}
	return strings.Join(parts, ", ")
}

func describe(ex *exchange) string {
	if ex.err != nil {
		return ex.err.Error()
	}
	return fmt.Sprintf("answered %d", ex.status)
}

// shownHeaders are the response headers kept as evidence.
var shownHeaders = []string{"Content-Type", "Location", "Retry-After", "Set-Cookie"}

func evidence(ex *exchange) Evidence {
	e := Evidence{Request: describeRequest(ex.req), Status: ex.status, Millis: ex.elapsed.Milliseconds()}
	if ex.err != nil {
		e.Error = ex.err.Error()
	}
	for _, h := range shownHeaders {
		if v := ex.header.Get(h); v != "" {
			if e.Headers == nil {
				e.Headers = map[string]string{}
			}
			if h == "Set-Cookie" {
				name, _, _ := strings.Cut(v, "=")
				v = name + "=…"
			}
			e.Headers[h] = v
		}
	}
	if m := markerName(ex.header); m != "" {
		if e.Headers == nil {
			e.Headers = map[string]string{}
		}
		name, v, _ := strings.Cut(m, ": ")
		e.Headers[name] = v
	}
	b := ex.body
	if len(b) > 200 {
		b = append(b[:200:200], "…"...)
	}
	e.Body = string(b)
	return e
}

func describeRequest(r request) string {
	var b strings.Builder
	b.WriteString(r.method + " " + r.path)
	if r.key != "" {
		fmt.Fprintf(&b, "  key %s", r.key)
	} else {
		b.WriteString("  (no key)")
	}
	if r.callerB {
		b.WriteString("  as caller B")
	}
	if r.body != "" {
		body := r.body
		if len(body) > 80 {
			body = body[:80] + "…"
		}
		fmt.Fprintf(&b, "  body %s", body)
	}
	return b.String()
}
