package httpidem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// ProblemNeverHappened is the problem type a service answers a resolve
// request with (404) when it has no trace of the operation of the key:
// the held key is then released, and the next retry runs the request.
const ProblemNeverHappened = problemBase + "never-happened"

// Headers of a resolve request (ResolveURL), besides the key and the
// caller's scope headers: what ties the service's answer to the held
// request, so that a service never answers one caller's question with
// another caller's record.
const (
	// ResolveScopeHeader carries ScopeDigest of the caller's scope.
	ResolveScopeHeader = "Idempotency-Scope"
	// ResolveRequestHeader carries the held request's method and path
	// ("POST /charges"; the path as sent, never the query).
	ResolveRequestHeader = "Idempotency-Request"
	// FingerprintHeader carries the held request's fingerprint (64 hex
	// digits: idem.Fingerprint.String). idem proxy also sends it with
	// each request it forwards, so that a service can keep it with its
	// record and return it in its resolve answers: an answer that carries
	// another fingerprint is refused. Clients' copies are removed.
	FingerprintHeader = "Idempotency-Fingerprint"
	// ResolveStepHeader carries the name of the step the key is held in
	// (ResolveQuestion.Step), percent-encoded (url.PathEscape), when the
	// held record names one: a service can route the question by step. A
	// service that sends it back in its answer must send the same name:
	// an answer for another step is refused.
	ResolveStepHeader = "Idempotency-Step"
)

// ResolveQuestion is what the middleware asks a ResolveFunc about: a held
// key and what ties an answer to the held request.
type ResolveQuestion struct {
	// Key is the key in its canonical spelling (FormatKey).
	Key string
	// Request is the request the middleware holds the key for, or a
	// retry of it (same caller, same fingerprint): its method, URL and
	// headers, without a body. Its key header is as the client sent it.
	Request *http.Request
	// ScopeDigest is ScopeDigest of the caller's scope: the key is this
	// caller's, and only this caller's record may answer.
	ScopeDigest string
	// Fingerprint is the held request's fingerprint.
	Fingerprint idem.Fingerprint
	// Step is the step of an operation of steps (package step) the key
	// is held in, and the steps that finished before it, as the held
	// record names them; a zero Name when it names none. A ResolveFunc
	// may answer per step (look up the step's own call).
	Step idem.HeldStep
}

// ResolveAnswer is what a service says became of a held key's request.
type ResolveAnswer struct {
	// NeverHappened: the service has no trace of the operation; the key
	// is released so that the next retry runs it.
	NeverHappened bool
	// Otherwise the response the service gives for the key: when its
	// Status is 2xx it becomes the key's result, replayed to every retry,
	// with the headers a first response would not store dropped
	// (Config.DropHeaders, Set-Cookie, hop-by-hop). Any other status, a
	// body over Config.MaxResponse, or a Fingerprint that is not the
	// question's is refused (ErrResolveRefused): the key stays held.
	Status int
	Header http.Header
	Body   []byte
	// Fingerprint, when not empty, is the fingerprint the service keeps
	// with its record (FingerprintHeader, in hex): it must be the
	// question's.
	Fingerprint string
	// Step, when not empty, is the step the service answers for
	// (ResolveStepHeader), also with NeverHappened: it must be the
	// question's Step.Name, or the answer is refused.
	Step string
}

// ErrResolveRefused is matched by the error of a resolve answer that
// cannot become the key's result: not a 2xx (a redirect, 401, 404, 429
// …), a body over the limit, another request's fingerprint. The key stays
// held and is asked about again later.
var ErrResolveRefused = errors.New("httpidem: the resolve answer cannot be the key's result")

// ResolveFunc asks the service what became of q.Request, a request whose
// key is held (its outcome is unknown). An error leaves the key held; the
// middleware asks again later, with backoff. See Config.ResolveFunc.
type ResolveFunc func(ctx context.Context, q ResolveQuestion) (ResolveAnswer, error)

// resolveMaxBody is the largest answer body ResolveURL reads: the
// default MaxResponse.
const resolveMaxBody = DefaultMaxResponse

// ResolveURL returns a ResolveFunc that asks target with "GET target",
// carrying:
//
//   - Idempotency-Key: the key as the client sent it (the held request's
//     header; the canonical spelling when the key came from the body);
//   - Idempotency-Scope: the scope digest, Idempotency-Request: the method
//     and path, Idempotency-Fingerprint: the fingerprint;
//   - Idempotency-Step: the step the key is held in (percent-encoded),
//     when the held record names one;
//   - the caller's scope headers (scopeHeaders; nil: Authorization).
//
// The service looks its record up by the caller (whom the scope headers
// authenticate) and the key, never by the key alone. It answers:
//
//   - 404 with a problem+json body whose type is ProblemNeverHappened:
//     the operation never happened;
//   - a 2xx: the response the service gives for the key (stored and
//     replayed), with Idempotency-Fingerprint when it keeps one, and
//     Idempotency-Step (percent-encoded) when it answers for a step;
//   - anything else (a redirect is not followed), a body over 8 MiB, or
//     no answer: unknown still (an error).
//
// client nil means a client with a 10-second timeout; a client given is
// copied, and the copy never follows redirects (they could carry the
// caller's Authorization to another host).
func ResolveURL(target string, client *http.Client, scopeHeaders []string) (ResolveFunc, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, &idem.ConfigError{Package: "httpidem", Field: "target", Reason: "want an http:// or https:// URL with a host"}
	}
	c := http.Client{Timeout: 10 * time.Second}
	if client != nil {
		c = *client
	}
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if len(scopeHeaders) == 0 {
		scopeHeaders = []string{"Authorization"}
	}
	return func(ctx context.Context, q ResolveQuestion) (ResolveAnswer, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
		if err != nil {
			return ResolveAnswer{}, err
		}
		key := q.Key
		if vs := q.Request.Header.Values(DefaultHeader); len(vs) == 1 {
			key = vs[0]
		}
		req.Header.Set(DefaultHeader, key)
		req.Header.Set(ResolveScopeHeader, q.ScopeDigest)
		req.Header.Set(ResolveRequestHeader, requestLine(q.Request))
		req.Header.Set(FingerprintHeader, q.Fingerprint.String())
		if q.Step.Name != "" {
			req.Header.Set(ResolveStepHeader, url.PathEscape(q.Step.Name))
		}
		for _, h := range scopeHeaders {
			for _, v := range q.Request.Header.Values(h) {
				req.Header.Add(h, v)
			}
		}
		resp, err := c.Do(req)
		if err != nil {
			return ResolveAnswer{}, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, resolveMaxBody+1))
		if err != nil {
			return ResolveAnswer{}, err
		}
		if len(body) > resolveMaxBody {
			return ResolveAnswer{}, fmt.Errorf("%w: a %d answer with a body over %d bytes", ErrResolveRefused, resp.StatusCode, resolveMaxBody)
		}
		step := resp.Header.Get(ResolveStepHeader)
		if step != "" {
			if step, err = url.PathUnescape(step); err != nil {
				return ResolveAnswer{}, fmt.Errorf("%w: %s: %w", ErrResolveRefused, ResolveStepHeader, err)
			}
		}
		if resp.StatusCode == http.StatusNotFound {
			if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt == "application/problem+json" {
				var p Problem
				if json.Unmarshal(body, &p) == nil && p.Type == ProblemNeverHappened {
					return ResolveAnswer{NeverHappened: true, Step: step}, nil
				}
			}
		}
		switch {
		case resp.StatusCode >= 300 && resp.StatusCode < 400:
			return ResolveAnswer{}, fmt.Errorf("%w: the resolve URL answered %d (a redirect, not followed)", ErrResolveRefused, resp.StatusCode)
		case resp.StatusCode >= 500:
			return ResolveAnswer{}, fmt.Errorf("httpidem: the resolve URL answered %d", resp.StatusCode)
		case resp.StatusCode < 200 || resp.StatusCode > 299:
			return ResolveAnswer{}, fmt.Errorf("%w: the resolve URL answered %d", ErrResolveRefused, resp.StatusCode)
		}
		h := resp.Header.Clone()
		delete(h, "Date")
		fp := h.Get(FingerprintHeader)
		delete(h, FingerprintHeader)
		delete(h, ResolveStepHeader)
		return ResolveAnswer{Status: resp.StatusCode, Header: h, Body: body, Fingerprint: fp, Step: step}, nil
	}, nil
}

// ResolverStats counts the middleware's resolve requests (Config.ResolveFunc).
type ResolverStats struct {
	Pending  int64  // held keys waiting for an answer
	Asked    uint64 // resolve requests sent
	Failed   uint64 // of them, without a usable answer (the key stays held)
	Refused  uint64 // of Failed, answers refused (ErrResolveRefused)
	Resolved uint64 // held keys resolved with the service's answer
	Released uint64 // held keys released (never happened)
	Dropped  uint64 // held keys not followed up (MaxPending reached, or Close)
}

// ResolveOutcome is what one resolve question came to: each is logged
// and told to Config.ResolvedFunc.
type ResolveOutcome string

// Resolve outcomes.
const (
	ResolveResult  ResolveOutcome = "result"  // the answer became the key's result
	ResolveRelease ResolveOutcome = "release" // never happened: the key was released
	ResolveRefused ResolveOutcome = "refused" // ErrResolveRefused: the key stays held
	ResolveError   ResolveOutcome = "error"   // no answer, or the store failed: the key stays held
	ResolveSettled ResolveOutcome = "settled" // the record was no longer held (resolved first by someone else, or expired)
)

// Resolve backoff: the first question goes at once, then after 1s, 2s, 4s …
// up to a minute between questions.
const (
	resolveFirstBackoff = time.Second
	resolveMaxBackoff   = time.Minute
	resolveMaxPending   = 10000
	resolveTimeout      = 10 * time.Second
)

type resolver struct {
	fn      ResolveFunc
	store   idem.Store
	retain  time.Duration
	counted func(ResolveOutcome) // Config.ResolvedFunc, or nil
	log     *slog.Logger
	drop    []string // the headers a first response does not store
	maxBody int      // Config.MaxResponse

	mu      sync.Mutex
	stopped bool
	keys    map[idem.Digest]bool // followed up now, by this process
	stop    chan struct{}
	wg      sync.WaitGroup

	pending                                             atomic.Int64
	asked, failed, refused, resolved, released, dropped atomic.Uint64
}

// follow asks the service, in the background until it answers or the
// record stops being held, about the held record of owner, r's, whose
// fingerprint is fp. A zero fence (a replay of a held answer: a process
// that held the key may have died before it heard back) is read from the
// store first. step is the step the held record names (zero: none). A
// key is followed up once at a time per process.
func (z *resolver) follow(r *http.Request, key idem.Key, owner idem.Owner, fp idem.Fingerprint, step idem.HeldStep) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.keys[key.Digest()] {
		return
	}
	if z.stopped || z.pending.Load() >= resolveMaxPending {
		z.dropped.Add(1)
		return
	}
	if z.keys == nil {
		z.keys = make(map[idem.Digest]bool)
	}
	z.keys[key.Digest()] = true
	z.pending.Add(1)
	z.wg.Add(1)
	req := r.Clone(context.Background())
	req.Body = nil
	q := ResolveQuestion{Key: FormatKey(key.ID()), Request: req, ScopeDigest: ScopeDigest(key.Scope()), Fingerprint: fp, Step: step}
	go z.run(q, owner)
}

func (z *resolver) run(q ResolveQuestion, owner idem.Owner) {
	defer z.wg.Done()
	defer z.pending.Add(-1)
	defer func() {
		z.mu.Lock()
		delete(z.keys, owner.Key.Digest())
		z.mu.Unlock()
	}()
	deadline := time.Now().Add(z.retain)
	backoff := time.Duration(0)
	for {
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-z.stop:
				t.Stop()
				z.dropped.Add(1)
				return
			case <-t.C:
			}
		}
		backoff = min(max(2*backoff, resolveFirstBackoff), resolveMaxBackoff)
		if time.Now().After(deadline) {
			return // the record expired: nothing is held any more
		}
		if z.ask(q, &owner) {
			return
		}
	}
}

// ask asks once, and logs and counts what came of it; done reports that
// the key needs no more questions.
func (z *resolver) ask(q ResolveQuestion, owner *idem.Owner) (done bool) {
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	go func() {
		select {
		case <-z.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	status := 0
	outcome, err := z.settle(ctx, q, owner, &status)
	switch outcome {
	case "":
		return true // a store without Lookup, or the record is gone: nothing to ask
	case ResolveResult:
		z.resolved.Add(1)
	case ResolveRelease:
		z.released.Add(1)
	case ResolveRefused:
		z.refused.Add(1)
		z.failed.Add(1)
	case ResolveError:
		z.failed.Add(1)
	}
	if z.counted != nil {
		z.counted(outcome)
	}
	level := slog.LevelWarn // a held key changed, or a service answers wrongly
	if outcome == ResolveError || outcome == ResolveSettled {
		level = slog.LevelInfo
	}
	if z.log.Enabled(ctx, level) {
		attrs := []slog.Attr{slog.String("outcome", string(outcome)), slog.String("key", owner.Key.String()),
			slog.String("request", requestLine(q.Request))}
		if q.Step.Name != "" {
			attrs = append(attrs, slog.String("step", q.Step.Name))
		}
		if status != 0 {
			attrs = append(attrs, slog.Int("status", status))
		}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		z.log.LogAttrs(ctx, level, "held key: asked the service", attrs...)
	}
	return outcome != ResolveRefused && outcome != ResolveError
}

// settle asks the service about q and applies its answer; status is set
// to the answer's status when there is one.
func (z *resolver) settle(ctx context.Context, q ResolveQuestion, owner *idem.Owner, status *int) (ResolveOutcome, error) {
	if owner.Fence == 0 {
		rec, err := idem.Lookup(ctx, z.store, owner.Key.Digest())
		switch {
		case err != nil && !idem.IsUnavailable(err):
			return "", err // gone, or a store without Lookup
		case err != nil:
			return ResolveError, err
		case rec.State != idem.StateHeld:
			return "", nil
		}
		owner.Fence = rec.Fence
	}
	z.asked.Add(1)
	ans, err := z.fn(ctx, q)
	switch {
	case errors.Is(err, ErrResolveRefused):
		return ResolveRefused, err
	case err != nil:
		return ResolveError, err
	}
	if ans.Step != "" && ans.Step != q.Step.Name {
		return ResolveRefused, fmt.Errorf("%w: the service answered for step %q, the key is held in %q", ErrResolveRefused, ans.Step, q.Step.Name)
	}
	res := idem.Resolution{Digest: owner.Key.Digest(), Fence: owner.Fence, Release: ans.NeverHappened}
	if !ans.NeverHappened {
		*status = ans.Status
		if err := z.acceptable(q, ans); err != nil {
			return ResolveRefused, err
		}
		h := ans.Header.Clone()
		for _, d := range z.drop {
			h.Del(d)
		}
		b, err := EncodeResponse(ans.Status, h, ans.Body)
		if err != nil {
			return ResolveRefused, fmt.Errorf("%w: %w", ErrResolveRefused, err)
		}
		res.Result = b
	}
	switch err := idem.Resolve(ctx, z.store, res); {
	case err == nil && res.Release:
		return ResolveRelease, nil
	case err == nil:
		return ResolveResult, nil
	case errors.Is(err, idem.ErrNotHeld), errors.Is(err, idem.ErrNotFound):
		return ResolveSettled, err // resolved by someone else, or expired
	case errors.Is(err, idem.ErrNoResolver):
		return "", err // a store that cannot
	default:
		return ResolveError, err
	}
}

// acceptable reports why ans, an answer that is not "never happened",
// cannot become the key's result (nil: it can).
func (z *resolver) acceptable(q ResolveQuestion, ans ResolveAnswer) error {
	switch {
	case ans.Status < 200 || ans.Status > 299:
		return fmt.Errorf("%w: status %d, not a 2xx", ErrResolveRefused, ans.Status)
	case len(ans.Body) > z.maxBody:
		return fmt.Errorf("%w: a body of %d bytes, over MaxResponse", ErrResolveRefused, len(ans.Body))
	case ans.Fingerprint != "" && !strings.EqualFold(ans.Fingerprint, q.Fingerprint.String()):
		return fmt.Errorf("%w: the service's record has another request's fingerprint", ErrResolveRefused)
	}
	return nil
}

func (z *resolver) close() {
	z.mu.Lock()
	if !z.stopped {
		z.stopped = true
		close(z.stop)
	}
	z.mu.Unlock()
	z.wg.Wait()
}

func (z *resolver) stats() ResolverStats {
	return ResolverStats{
		Pending: z.pending.Load(), Asked: z.asked.Load(), Failed: z.failed.Load(), Refused: z.refused.Load(),
		Resolved: z.resolved.Load(), Released: z.released.Load(), Dropped: z.dropped.Load(),
	}
}

// ResolverStats returns the counts of the resolve requests (zero without
// Config.ResolveFunc).
func (m *Middleware) ResolverStats() ResolverStats {
	if m.resolver == nil {
		return ResolverStats{}
	}
	return m.resolver.stats()
}

// Close stops the background resolve requests (Config.ResolveFunc) and
// waits for them; their keys stay held. It is safe to call more than once;
// without a ResolveFunc it does nothing.
func (m *Middleware) Close() error {
	if m.resolver != nil {
		m.resolver.close()
	}
	return nil
}
