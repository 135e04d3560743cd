package idemclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Problem types of idem's servers (httpidem, idem proxy) that change what
// the client does; see httpidem/problems.md.
const (
	problemBase                = "https://github.com/idemkit/idem/blob/main/httpidem/problems.md#"
	problemInFlight            = problemBase + "in-flight"
	problemOutcomeUnknown      = problemBase + "outcome-unknown"
	problemUpstreamUnreachable = problemBase + "upstream-unreachable"
	problemNotStored           = problemBase + "result-not-stored"
)

// maxProblemPeek is how much of a problem+json body is read to find its
// type.
const maxProblemPeek = 16 << 10

// prepareBody arranges for r's body to be sent on every attempt.
func (t *Transport) prepareBody(req *http.Request, r *request) error {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		r.getBody = func() (io.ReadCloser, error) { return http.NoBody, nil }
		r.first = req.Body
	case req.GetBody != nil:
		r.getBody = req.GetBody
		r.first = req.Body
	default:
		buf, err := io.ReadAll(io.LimitReader(req.Body, t.cfg.MaxBufferedBody+1))
		if err != nil {
			req.Body.Close()
			return err
		}
		if int64(len(buf)) > t.cfg.MaxBufferedBody {
			// Too long to keep: sent once, as it streams.
			r.once = true
			r.first = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(buf), req.Body), req.Body}
			break
		}
		req.Body.Close()
		r.getBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf)), nil }
		r.first = io.NopCloser(bytes.NewReader(buf))
		if r.length <= 0 {
			r.length = int64(len(buf))
		}
	}
	return nil
}

// verdict is what an attempt's answer or error means.
type verdict struct {
	retry   bool
	reason  Reason
	wait    time.Duration // Retry-After, when the server gave one
	reached bool          // the attempt may have reached the service
	unknown bool          // the server said outcome-unknown
}

// loop sends r's attempts until one is final or the rules stop it.
func (t *Transport) loop(ctx context.Context, r *request) (*http.Response, error) {
	start := time.Now()
	var reached bool
	for n := 1; ; n++ {
		body := r.first
		if n > 1 {
			var err error
			if body, err = r.getBody(); err != nil {
				return nil, t.stop(r, n-1, reached, 0, false, err, err)
			}
		}
		resp, v, cancel, took, err := t.attempt(ctx, r, body)
		reached = reached || v.reached
		status, replayed := 0, false
		if resp != nil {
			status, replayed = resp.StatusCode, Replayed(resp)
		}
		ev := Event{Kind: EventAttempt, Method: r.orig.Method, Host: r.orig.URL.Host, Key: r.key, Attempt: n, Status: status, Replayed: replayed, Err: err, Reason: v.reason, Duration: took}

		if v.unknown {
			discard(resp)
			cancel(nil)
			ev.Decision = DecisionOutcomeUnknown
			t.observe(ctx, ev)
			return nil, &OutcomeUnknownError{Key: r.key, Status: status, Replayed: replayed, Attempts: n, Err: errors.New(http.StatusText(status) + ": outcome-unknown")}
		}
		if !v.retry {
			if err != nil && ctx.Err() != nil {
				cancel(nil)
				ev.Decision, ev.Reason = DecisionGiveUp, ReasonDeadline
				t.observe(ctx, ev)
				return nil, t.stop(r, n, reached, 0, false, context.Cause(ctx), err)
			}
			ev.Decision = DecisionDone
			t.observe(ctx, ev)
			if err != nil {
				cancel(nil)
				return nil, err
			}
			resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
			return resp, nil
		}

		// Retryable: may we?
		var stopErr error
		wait := v.wait
		switch {
		case ctx.Err() != nil:
			ev.Reason, stopErr = ReasonDeadline, context.Cause(ctx)
		case r.once:
			ev.Reason, stopErr = ReasonBody, ErrBodyNotReplayable
		case n >= t.cfg.MaxAttempts:
			ev.Reason, stopErr = ReasonAttempts, ErrAttemptsExhausted
		case wait > t.cfg.MaxRetryAfter:
			ev.Reason, stopErr = ReasonRetryAfter, ErrRetryAfterTooLong
		}
		if stopErr == nil {
			if wait <= 0 {
				wait = t.backoff(n)
			}
			if time.Since(start)+wait > t.cfg.MaxElapsed {
				ev.Reason, stopErr = ReasonElapsed, ErrElapsedExhausted
			} else if d, ok := ctx.Deadline(); ok && time.Until(d) <= wait {
				ev.Reason, stopErr = ReasonDeadline, context.DeadlineExceeded
			} else if !t.cfg.Budget.spend() {
				ev.Reason, stopErr = ReasonBudget, ErrBudgetExhausted
			}
		}
		if stopErr != nil {
			ev.Decision = DecisionGiveUp
			t.observe(ctx, ev)
			if resp != nil && !reached {
				// A definite answer, and nothing can have run: the caller
				// gets it as it is (a 503 or 429 with its Retry-After).
				resp.Body = &cancelBody{ReadCloser: resp.Body, cancel: cancel}
				return resp, nil
			}
			discard(resp)
			cancel(nil)
			return nil, t.stop(r, n, reached, status, replayed, stopErr, errOf(err, status))
		}
		discard(resp)
		cancel(nil)
		ev.Decision = DecisionRetry
		t.observe(ctx, ev)
		t.observe(ctx, Event{Kind: EventWait, Method: r.orig.Method, Host: r.orig.URL.Host, Key: r.key, Attempt: n + 1, Duration: wait})
		if !sleep(ctx, wait) {
			return nil, t.stop(r, n, reached, status, replayed, context.Cause(ctx), errOf(err, status))
		}
	}
}

// errOf is the last attempt's error, or one that names its status.
func errOf(err error, status int) error {
	if err != nil {
		return err
	}
	return errors.New(strconv.Itoa(status) + " " + http.StatusText(status))
}

// stop builds the error of a request whose retries ended.
func (t *Transport) stop(r *request, attempts int, reached bool, status int, replayed bool, why, last error) error {
	if reached && r.key != "" {
		err := why
		if last != nil && last != why {
			err = errors.Join(why, last)
		}
		return &OutcomeUnknownError{Key: r.key, Status: status, Replayed: replayed, Attempts: attempts, Err: err}
	}
	return &RetryError{Key: r.key, Attempts: attempts, Stop: why, Last: last}
}

// attempt sends one attempt and classifies its answer. cancel releases the
// attempt's context: call it once the answer's body is done with.
func (t *Transport) attempt(ctx context.Context, r *request, body io.ReadCloser) (resp *http.Response, v verdict, cancel context.CancelCauseFunc, took time.Duration, err error) {
	actx, cancel := context.WithCancelCause(ctx)
	var timer *time.Timer
	if t.cfg.AttemptTimeout > 0 {
		timer = time.AfterFunc(t.cfg.AttemptTimeout, func() { cancel(ErrAttemptTimeout) })
	}
	out := r.orig.WithContext(actx)
	out.Header, out.Body, out.GetBody, out.ContentLength = r.header, body, r.getBody, r.length
	began := time.Now()
	resp, err = t.cfg.Transport.RoundTrip(out)
	took = time.Since(began)
	if err == nil {
		v = classify(resp)
	}
	if timer != nil && !timer.Stop() && context.Cause(actx) == ErrAttemptTimeout {
		// The attempt timed out, before or while its answer was read.
		if err == nil {
			discard(resp)
			resp = nil
		}
		err = ErrAttemptTimeout
		if ctx.Err() == nil {
			return nil, verdict{retry: true, reason: ReasonAttemptTimeout, reached: true}, cancel, took, err
		}
	}
	if err != nil {
		resp = nil
		switch {
		case ctx.Err() != nil:
			return nil, verdict{reached: !isDial(err)}, cancel, took, err
		case notRetryable(err):
			return nil, verdict{reason: ReasonNotRetryable}, cancel, took, err
		}
		return nil, verdict{retry: true, reason: ReasonTransport, reached: !isDial(err)}, cancel, took, err
	}
	if resp.Request == nil || resp.Request.Context() != actx {
		resp.Request = out
	}
	return resp, v, cancel, took, nil
}

// classify says what an answer means for the retry loop.
func classify(resp *http.Response) verdict {
	switch resp.StatusCode {
	case http.StatusConflict:
		ra, hasRA := retryAfter(resp.Header)
		if problemType(resp) == problemInFlight || hasRA {
			return verdict{retry: true, reason: ReasonInFlight, wait: ra, reached: true}
		}
	case http.StatusTooManyRequests:
		ra, _ := retryAfter(resp.Header)
		return verdict{retry: true, reason: ReasonThrottled, wait: ra}
	case http.StatusServiceUnavailable:
		ra, _ := retryAfter(resp.Header)
		return verdict{retry: true, reason: ReasonUnavailable, wait: ra, reached: problemType(resp) == problemNotStored}
	case http.StatusBadGateway, http.StatusGatewayTimeout:
		switch problemType(resp) {
		case problemOutcomeUnknown:
			return verdict{unknown: true, reached: true}
		case problemUpstreamUnreachable:
			ra, _ := retryAfter(resp.Header)
			return verdict{retry: true, reason: ReasonUpstreamUnreachable, wait: ra}
		}
	}
	return verdict{}
}

// problemType returns the "type" of an application/problem+json answer,
// or "". It reads at most maxProblemPeek bytes of the body and puts them
// back in front of the rest.
func problemType(resp *http.Response) string {
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		return ""
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/problem+json" {
		return ""
	}
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxProblemPeek))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(buf), readErr{err}, rest), rest}
	var p struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(buf, &p) != nil {
		return ""
	}
	return p.Type
}

// readErr replays a read error after the peeked bytes (nil: EOF, so the
// MultiReader moves on to the rest of the body).
type readErr struct{ err error }

func (r readErr) Read([]byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	return 0, io.EOF
}

// retryAfter parses Retry-After: delay-seconds or an HTTP-date.
func retryAfter(h http.Header) (time.Duration, bool) {
	v := h.Get("Retry-After")
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0, false
		}
		return time.Duration(min(s, 1<<31)) * time.Second, true
	} else if errors.Is(err, strconv.ErrRange) && v[0] != '-' && v[0] != '+' {
		// All digits, too many for an int64: a wait longer than any
		// MaxRetryAfter, not a header to ignore.
		return time.Duration(1<<31) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(time.Until(at), 0), true
	}
	return 0, false
}

// backoff is the full-jitter wait before retry n (n ≥ 1).
func (t *Transport) backoff(n int) time.Duration {
	ceil := t.cfg.MaxDelay
	if n-1 < 62 {
		if d := t.cfg.BaseDelay << (n - 1); d > 0 && d < ceil {
			ceil = d
		}
	}
	if ceil <= 0 {
		return 0
	}
	return rand.N(ceil)
}

func (t *Transport) observe(ctx context.Context, e Event) {
	if t.cfg.Observer != nil {
		t.cfg.Observer.Observe(ctx, e)
	}
}

// isDial reports whether err happened while connecting: nothing was sent.
func isDial(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// notRetryable reports errors that another attempt cannot fix.
func notRetryable(err error) bool {
	var cv *tls.CertificateVerificationError
	var rh tls.RecordHeaderError
	return errors.As(err, &cv) || errors.As(err, &rh)
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// discard drains a little of an answer that is not returned, so that its
// connection can be reused, and closes it.
func discard(resp *http.Response) {
	if resp == nil {
		return
	}
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	resp.Body.Close()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// cancelBody releases the attempt's context when the caller closes the
// body.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel(nil)
	return err
}
