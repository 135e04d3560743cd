// The run: its types, the runner and the verdict helpers every check uses.
// Each family of checks is a file of its own (check_endpoint.go,
// check_replay.go, check_mismatch.go, check_key.go, check_concurrency.go,
// check_scope.go, check_failure.go, check_expiry.go); judge.go tells a
// replay from an execution, evidence.go renders what a result shows.

package apicheck

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// run sends the endpoint's first request, then runs each family of checks
// in turn.
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
