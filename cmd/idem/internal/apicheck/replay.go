package apicheck

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/textproto"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// ReplayConfig describes an `idem replay`: recorded traffic sent again to
// a staging service, several times, shuffled, concurrently and late, with
// the effects of each recorded operation counted.
type ReplayConfig struct {
	// Target is the base URL of the service under test; every request
	// goes to its origin and nowhere else, and no redirect is followed.
	Target string
	// Copies is how many times each record is sent; default 2.
	Copies int
	// Concurrency is the number of requests in flight at once; default 8.
	Concurrency int
	// Delay: each request waits a random time up to Delay before it is
	// sent, so that some copies arrive late; default 0.
	Delay time.Duration
	// Seed makes the shuffle and the delays repeatable; 0 picks one.
	Seed uint64
	// Credentials maps each placeholder of the recording to the header
	// value sent in its place.
	Credentials map[string]string
	// SameKeys sends the recorded keys as they are. By default each key
	// gets a suffix unique to the run, so that a second replay against the
	// same staging service is not answered from the first one's records.
	SameKeys bool
	// KeyHeader names the key header; default Idempotency-Key, which gets
	// the key as an RFC 8941 string. Another header (a webhook's
	// Webhook-Id) gets the key as recorded.
	KeyHeader string
	// Oracle counts effects, as in Config.Oracle. With id: (or none: the
	// 2xx bodies), every request of the storm is sent in one shuffled
	// stream and the effects of an operation are the distinct ids among
	// its answers. With count: or cmd:, operations are sent one after
	// another (each one's copies shuffled and concurrent), with a count
	// before and after each.
	Oracle string
	// MaxRequests bounds every request sent, oracle reads included;
	// default 1000. A replay that would need more is refused up front.
	MaxRequests int
	// Rate bounds requests per second; default 100.
	Rate float64
	// Timeout bounds each request; default 10s.
	Timeout time.Duration
}

// Answer kinds.
const (
	AnswerReplayed = "replayed" // 2xx marked as a replay
	AnswerExecuted = "executed" // 2xx not marked
	AnswerRefused  = "refused"  // 4xx (409 in flight, 422 mismatch, …)
	AnswerFailed   = "failed"   // 5xx, or no answer
)

// Operation is one recorded operation (a caller's key) and what its
// replay caused.
type Operation struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Key    string `json:"key"`
	Scope  string `json:"scope"`
	// Recorded is the number of records of the operation (a client's own
	// retries are several records of one operation).
	Recorded int            `json:"recorded"`
	Sent     int            `json:"sent"`
	Answers  map[string]int `json:"answers"`
	// Effects is what the oracle saw: distinct ids (or bodies) among the
	// 2xx answers, or the counted effects.
	Effects int64 `json:"effects"`
	// Duplicate is set when the operation had more than one effect.
	Duplicate bool `json:"duplicate,omitempty"`
	// Requests are the requests sent, kept for duplicates.
	Requests []Evidence `json:"requests,omitempty"`
	Error    string     `json:"error,omitempty"`
}

// ReplayReport is the outcome of a replay.
type ReplayReport struct {
	Target     string         `json:"target"`
	Oracle     string         `json:"oracle"`
	Started    time.Time      `json:"started"`
	Millis     int64          `json:"ms"`
	Requests   int64          `json:"requests"`
	Records    int            `json:"records"`
	Copies     int            `json:"copies"`
	Answers    map[string]int `json:"answers"`
	Duplicates int            `json:"duplicates"`
	Operations []*Operation   `json:"operations"`
}

// Progress is reported while a replay runs.
type Progress struct {
	Done, Total int
	Answers     map[string]int
}

type replayJob struct {
	op    *Operation
	req   request
	delay time.Duration
}

// Replay sends the records again as cfg says and reports, per operation,
// the effects and the answers. progress, when not nil, is called every
// quarter of the way.
func Replay(ctx context.Context, cfg ReplayConfig, records []Record, progress func(Progress)) (*ReplayReport, error) {
	if cfg.Copies == 0 {
		cfg.Copies = 2
	}
	if cfg.Concurrency == 0 {
		cfg.Concurrency = 8
	}
	if cfg.MaxRequests == 0 {
		cfg.MaxRequests = 1000
	}
	if cfg.Rate == 0 {
		cfg.Rate = 100
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	switch {
	case cfg.Copies < 1 || cfg.Copies > 100:
		return nil, errors.New("copies: want 1 to 100")
	case cfg.Concurrency < 1 || cfg.Concurrency > 256:
		return nil, errors.New("concurrency: want 1 to 256")
	case cfg.Delay < 0:
		return nil, errors.New("delay: want a positive duration")
	}
	// The check's client, with its rules: one origin, no redirect, the
	// budget and the rate.
	cc, err := Config{URL: cfg.Target, MaxRequests: max(cfg.MaxRequests, 10), Rate: cfg.Rate, Timeout: Duration(cfg.Timeout),
		KeyHeader: cfg.KeyHeader, Oracle: cfg.Oracle}.normalize()
	if err != nil {
		return nil, err
	}
	cc.MaxRequests = cfg.MaxRequests
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	run := unique()[:6]

	// The budget first, before anything is built: records × copies (plus
	// two oracle reads per operation when effects are counted) within
	// MaxRequests, or a refusal that costs no memory.
	counted := cc.oracle.counts()
	replayable := 0
	opCount := 0
	seenOps := map[[2]string]bool{}
	for i := range records {
		if records[i].BodyOmitted {
			continue
		}
		replayable++
		if counted {
			if id := [2]string{records[i].Scope, records[i].Key}; !seenOps[id] {
				seenOps[id] = true
				opCount++
			}
		}
	}
	seenOps = nil
	if need := replayable*cfg.Copies + 2*opCount; need > cfg.MaxRequests {
		return nil, fmt.Errorf("the replay needs %d requests (%d records × %d copies%s): more than --max-requests %d",
			need, replayable, cfg.Copies, map[bool]string{true: ", plus two oracle reads per operation"}[counted], cfg.MaxRequests)
	}

	// Group the records into operations and build the jobs.
	ops := map[[2]string]*Operation{}
	var order []*Operation
	var jobs []replayJob
	var missing []string
	for i := range records {
		rec := &records[i]
		if rec.BodyOmitted {
			continue
		}
		id := [2]string{rec.Scope, rec.Key}
		op := ops[id]
		if op == nil {
			op = &Operation{Method: rec.Method, Path: rec.Path, Key: rec.Key, Scope: rec.Scope, Answers: map[string]int{}}
			ops[id] = op
			order = append(order, op)
		}
		op.Recorded++
		body, err := rec.BodyBytes()
		if err != nil {
			return nil, fmt.Errorf("record %d: body: %w", i+1, err)
		}
		hdrs := [][2]string{}
		names := make([]string, 0, len(rec.Headers))
		for n := range rec.Headers {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			v := rec.Headers[n]
			if IsPlaceholder(v) {
				real, ok := cfg.Credentials[v]
				if !ok {
					if !slices.Contains(missing, v) {
						missing = append(missing, v)
					}
					continue
				}
				v = real
			}
			hdrs = append(hdrs, [2]string{textproto.CanonicalMIMEHeaderKey(n), v})
		}
		key := rec.Key
		if !cfg.SameKeys {
			key += "-replay-" + run
		}
		path := rec.Path
		if rec.Query != "" {
			q, miss := fillQuery(rec.Query, cfg.Credentials)
			for _, m := range miss {
				if !slices.Contains(missing, m) {
					missing = append(missing, m)
				}
			}
			path += "?" + q
		}
		// Idempotency-Key takes an RFC 8941 string; another header (a
		// webhook's delivery id) gets the value as recorded.
		sent := key
		if cc.KeyHeader == "Idempotency-Key" {
			sent = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		}
		req := request{method: rec.Method, path: path, key: sent, body: string(body), headers: hdrs}
		for range cfg.Copies {
			var d time.Duration
			if cfg.Delay > 0 {
				d = time.Duration(rng.Int64N(int64(cfg.Delay) + 1))
			}
			jobs = append(jobs, replayJob{op: op, req: req, delay: d})
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("credentials: no value for %s (give a mapping file, --credentials)", strings.Join(missing, ", "))
	}
	if len(jobs) == 0 {
		return nil, errors.New("no replayable records (every body was omitted)")
	}
	rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })

	cl := newClient(cc)
	defer cl.close()
	rep := &ReplayReport{Target: cc.base.Redacted(), Oracle: cc.oracle.String(), Started: time.Now(), Records: len(records),
		Copies: cfg.Copies, Answers: map[string]int{}, Operations: order}

	var mu sync.Mutex
	done := 0
	step := max(len(jobs)/4, 1)
	seen := map[*Operation][]*exchange{}
	record := func(op *Operation, ex *exchange) {
		kind := answerKind(ex)
		mu.Lock()
		defer mu.Unlock()
		op.Sent++
		op.Answers[kind]++
		rep.Answers[kind]++
		seen[op] = append(seen[op], ex)
		done++
		if progress != nil && (done%step == 0 || done == len(jobs)) {
			progress(Progress{Done: done, Total: len(jobs), Answers: maps.Clone(rep.Answers)})
		}
	}
	storm := func(ctx context.Context, js []replayJob) {
		ch := make(chan replayJob)
		var wg sync.WaitGroup
		for range min(cfg.Concurrency, len(js)) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range ch {
					if j.delay > 0 {
						t := time.NewTimer(j.delay)
						select {
						case <-t.C:
						case <-ctx.Done():
							t.Stop()
						}
					}
					record(j.op, cl.send(ctx, j.req))
				}
			}()
		}
	feed:
		for _, j := range js {
			select {
			case ch <- j:
			case <-ctx.Done():
				break feed
			}
		}
		close(ch)
		wg.Wait()
	}

	if counted {
		sendOrder := slices.Clone(order)
		rng.Shuffle(len(sendOrder), func(i, j int) { sendOrder[i], sendOrder[j] = sendOrder[j], sendOrder[i] })
		byOp := map[*Operation][]replayJob{}
		for _, j := range jobs {
			byOp[j.op] = append(byOp[j.op], j)
		}
		for _, op := range sendOrder {
			if ctx.Err() != nil {
				break
			}
			before, err1 := cc.oracle.count(ctx, cl)
			storm(ctx, byOp[op])
			after, err2 := cc.oracle.count(ctx, cl)
			if err := errors.Join(err1, err2); err != nil {
				op.Error = "oracle failed: " + err.Error()
				continue
			}
			op.Effects = after - before
		}
	} else {
		storm(ctx, jobs)
		for _, op := range order {
			ids := map[string]bool{}
			for _, ex := range seen[op] {
				if ex.ok() {
					ids[cc.oracle.identity(ex.body)] = true
				}
			}
			op.Effects = int64(len(ids))
		}
	}
	for _, op := range rep.Operations {
		if op.Effects > 1 {
			op.Duplicate = true
			rep.Duplicates++
			for _, ex := range seen[op] { // in the order the answers came
				op.Requests = append(op.Requests, evidence(ex))
			}
		}
	}
	// Duplicates first, then the recording's order.
	sort.SliceStable(rep.Operations, func(i, j int) bool {
		return rep.Operations[i].Duplicate && !rep.Operations[j].Duplicate
	})
	rep.Requests = cl.sent.Load()
	rep.Millis = time.Since(rep.Started).Milliseconds()
	return rep, ctx.Err()
}

func answerKind(ex *exchange) string {
	switch {
	case ex.err != nil || ex.status >= 500 || ex.status == 0:
		return AnswerFailed
	case ex.ok() && replayed(ex.header):
		return AnswerReplayed
	case ex.ok():
		return AnswerExecuted
	}
	return AnswerRefused
}

// Failed reports whether an operation had more than one effect.
func (r *ReplayReport) Failed() bool { return r.Duplicates > 0 }

// fillQuery replaces each placeholder value of a recorded query string
// (a redacted secret parameter, {{query-NAME-N}}) by its credential, and
// returns the placeholders it has no value for.
func fillQuery(raw string, creds map[string]string) (string, []string) {
	var missing []string
	parts := strings.Split(raw, "&")
	for i, part := range parts {
		name, value, ok := strings.Cut(part, "=")
		if !ok {
			continue
		}
		v, err := url.QueryUnescape(value)
		if err != nil || !IsPlaceholder(v) {
			continue
		}
		real, ok := creds[v]
		if !ok {
			missing = append(missing, v)
			continue
		}
		parts[i] = name + "=" + url.QueryEscape(real)
	}
	return strings.Join(parts, "&"), missing
}
