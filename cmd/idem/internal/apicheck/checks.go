package apicheck

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	refSeed   = "docs/guarantees.md: one key = one business action, decided atomically"
)

// Result is one check's outcome with its evidence.
type Result struct {
	ID        string `json:"id"`
	Title     string `json:"title"`
	Reference string `json:"reference"`
	Status    Status `json:"status"`
	Detail    string `json:"detail"`
	// Enable names the flag that would let a skipped check run.
	Enable   string     `json:"enable,omitempty"`
	Evidence []Evidence `json:"evidence,omitempty"`
}

// Evidence is one request the check sent and the answer it got.
type Evidence struct {
	Request string            `json:"request"`
	Status  int               `json:"status,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
	Error   string            `json:"error,omitempty"`
	// Timing says where the time of a failed request went.
	Timing string `json:"timing,omitempty"`
	Millis int64  `json:"ms"`
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

// Clean reports whether every check passed: no FAIL, WARN or SKIP (what
// `idem check --strict` requires).
func (r *Report) Clean() bool { return r.Counts[Fail]+r.Counts[Warn]+r.Counts[Skip] == 0 }

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

	// The first request and its retry, shared by the replay and scope
	// checks; own is what the retry was (replayed, executed, unknown).
	key, body1st  string
	ex1, ex2      *exchange
	before, after int64
	countErr      error
	own           seen
	ownWhy        string

	// probe is a first request with the body of ex1 under a fresh key;
	// distinct tells whether it answered differently (so that an identical
	// answer to a retry is a replay, not an execution).
	probe    *exchange
	distinct bool
	probed   bool
	marks    bool // the API marked a replay as one
}

func (r *runner) on(id string) bool { return r.cfg.selected[id] }

func (r *runner) anyOn(ids ...string) bool {
	for _, id := range ids {
		if r.on(id) {
			return true
		}
	}
	return false
}

func (r *runner) add(res Result) {
	if !r.on(res.ID) {
		return
	}
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
	if err := r.endpoint(ctx); err != nil {
		return err
	}
	for _, step := range []func(context.Context){
		r.replay, r.mismatch, r.keyRequired, r.keySyntax, r.keyForms, r.concurrency, r.inFlight,
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

// skipped is a SKIP that names the flag that would enable the check.
func skipped(id, title, ref, flag, detail string) Result {
	res := result(id, title, ref, Skip, detail)
	res.Enable = flag
	return res
}

// unfinished turns a failed request into a verdict: SKIP when the budget
// ran out, FAIL when a request the check depends on timed out (a hang is
// a finding; the evidence says where the time went), WARN otherwise (the
// check could not be made).
func (r *runner) unfinished(id, title, ref string, exs ...*exchange) (Result, bool) {
	for _, ex := range exs {
		if ex == nil || ex.err == nil {
			continue
		}
		switch {
		case errors.Is(ex.err, errBudget):
			return skipped(id, title, ref, "--max-requests", "the request budget ran out (--max-requests)"), true
		case ex.timedOut():
			return result(id, title, ref, Fail, fmt.Sprintf("%s %s hung: %s", ex.req.method, ex.req.path, ex.timing()), exs...), true
		default:
			return result(id, title, ref, Warn, "could not complete the check: "+ex.err.Error(), exs...), true
		}
	}
	return Result{}, false
}

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
		e.Timing = ex.timing()
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

func plural(n int64, noun string) string { return Plural(int(n), noun) }
