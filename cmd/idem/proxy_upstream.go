package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/promidem"
)

// ReexecutionHeader is sent to the service, set to "true", when the request
// runs after a takeover: a previous proxy that held the key's claim died
// (or lost its lease) and may have forwarded it already. A service with its
// own records should look the key up before acting. Clients' copies of the
// header are removed.
const ReexecutionHeader = "Idempotency-Reexecution"

// newProxyHandler is the sidecar: the middleware in front of a reverse
// proxy to o.upstream.
func newProxyHandler(o proxyOptions, store idem.Store, reg prometheus.Registerer, logger *slog.Logger) (http.Handler, error) {
	metrics, err := promidem.New(reg)
	if err != nil {
		return nil, err
	}
	cfg := &httpidem.Config{
		Methods:              o.methods,
		RequireKey:           o.requireKey,
		ScopeFunc:            proxyScopeFunc(o.scopeHeaders, o.anonymousShared),
		SharedAnonymousScope: o.anonymousShared, // proxyScopeFunc refuses anonymous callers unless shared
		JSONFingerprint:      o.jsonFingerprint,
		MaxBody:              o.maxBody,
		MaxResponse:          int(o.maxResponse),
		Lease:                o.lease,
		Retention:            o.retention,
		DropHeaders:          o.dropHeaders,
		KeepHeaders:          o.keepHeaders,
		WaitTimeout:          o.wait,
		StoreTimeout:         o.storeTimeout,
		Budget:               httpidem.NewMemoryBudget(o.memoryBudget, 0),
		UnknownOutcome:       o.unknownOutcome,
		// Hold mode marks each claim before it is forwarded, so that a
		// takeover after this process died never forwards it again.
		AtMostOnce:  o.unknownOutcome == httpidem.HoldUnknown,
		Logger:      logger,
		Observer:    metrics,
		RefusalFunc: o.refusal,
	}
	if o.store5xx {
		cfg.StoreStatusFunc = httpidem.StripeStoreStatus
	}
	if o.resolveURL != "" {
		if cfg.ResolveFunc, err = httpidem.ResolveURL(o.resolveURL, nil, o.scopeHeaders); err != nil {
			return nil, err
		}
		questions := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "idem_resolve_questions_total",
			Help: "Questions to the service about held keys (--resolve-url), by outcome: result, release, refused (the answer could not be the key's result), error, settled.",
		}, []string{"outcome"})
		if err := reg.Register(questions); err != nil {
			return nil, err
		}
		held := o.held
		cfg.ResolvedFunc = func(outcome httpidem.ResolveOutcome) {
			questions.WithLabelValues(string(outcome)).Inc()
			if held != nil && (outcome == httpidem.ResolveResult || outcome == httpidem.ResolveRelease) {
				held.Resolved("service", string(outcome))
			}
		}
	}
	mw, err := httpidem.New(store, cfg)
	if err != nil {
		return nil, err
	}
	upstream := o.upstream
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
			forwardKey(pr.Out.Header, httpidem.IsReexecution(pr.In.Context()))
			// What the service may keep with its record, for its answers to
			// --resolve-url; never a client's own.
			delete(pr.Out.Header, httpidem.FingerprintHeader)
			if fp, ok := httpidem.RequestFingerprint(pr.In.Context()); ok {
				pr.Out.Header[httpidem.FingerprintHeader] = []string{fp.String()}
			}
		},
		Transport:    newUpstreamTransport(o),
		ErrorLog:     slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		ErrorHandler: upstreamErrorHandler(logger, mw.WriteRefusal),
	}
	timeout := o.upstreamTimeout
	// The upstream call is never cancelled because the client went away
	// (the service finishes, the result is stored, the retry replays it),
	// but it never outlives --upstream-timeout either.
	detached := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), timeout)
		defer cancel()
		a := &attempt{}
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: a.gotConn})
		ctx = context.WithValue(ctx, attemptKey{}, a)
		defer func() {
			if p := recover(); p != nil {
				// ReverseProxy aborts the handler when the response body
				// breaks off after the status line: the service answered
				// in part, so the outcome is unknown.
				if p == http.ErrAbortHandler {
					cause := error(errBodyCut)
					if ctx.Err() != nil {
						cause = fmt.Errorf("%w: %w", httpidem.ErrUpstreamTimeout, errBodyCut)
					}
					logger.Warn("upstream response cut off: outcome unknown", "method", r.Method, "path", r.URL.Path, "error", cause.Error())
					if httpidem.OutcomeUnknown(w, cause) {
						return
					}
				}
				panic(p)
			}
		}()
		rp.ServeHTTP(w, r.WithContext(ctx))
	})
	return mw.Handler(detached), nil
}

var errBodyCut = errors.New("the service's response body broke off")

// forwardKey rewrites the key headers of a request about to be forwarded.
//
// The key goes out as the client sent it (the bytes a service that echoes
// or parses the key expects: Stripe's SDKs send k, not "k"), under a
// lower-case header name: http.Transport resends a request that carries
// an "Idempotency-Key" (or "X-Idempotency-Key") header, looked up by its
// canonical name, when a reused connection closes before the answer; a
// request that reached the service must never be sent twice. Header names
// are case-insensitive on the wire, so the service sees the same header.
//
// The alias X-Idempotency-Key is forwarded beside Idempotency-Key only
// when it names the same key: a service that reads the alias must never
// deduplicate on a key that the proxy did not protect.
func forwardKey(h http.Header, reexec bool) {
	delete(h, ReexecutionHeader)
	var protected string // the forwarded key's id; "" when none
	vs, keyed := h["Idempotency-Key"]
	if keyed {
		delete(h, "Idempotency-Key")
		if len(vs) == 1 {
			if id, err := httpidem.ParseKey(vs[0]); err == nil {
				protected = id
			}
		}
		h["idempotency-key"] = vs
	}
	if vs, ok := h["X-Idempotency-Key"]; ok {
		delete(h, "X-Idempotency-Key")
		if !keyed || sameKey(vs, protected) {
			h["x-idempotency-key"] = vs
		}
	}
	if reexec {
		h[ReexecutionHeader] = []string{"true"}
	}
}

// sameKey reports whether the header lines vs name the key id (not "").
func sameKey(vs []string, id string) bool {
	if len(vs) != 1 || id == "" {
		return false
	}
	alias, err := httpidem.ParseKey(vs[0])
	return err == nil && alias == id
}

// newUpstreamTransport is the transport to the service: HTTP/1.1 (so each
// request has its connection to itself, and "was anything sent?" has an
// exact answer), bounded waits, and connections that count the bytes
// written.
func newUpstreamTransport(o proxyOptions) *http.Transport {
	d := &net.Dialer{Timeout: min(10*time.Second, o.upstreamTimeout), KeepAlive: 30 * time.Second}
	return &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &countingConn{Conn: c}, nil
		},
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       o.upstreamIdleTimeout,
		TLSHandshakeTimeout:   min(10*time.Second, o.upstreamTimeout),
		ResponseHeaderTimeout: o.upstreamTimeout,
		ExpectContinueTimeout: time.Second,
		// A non-nil empty map: no HTTP/2 to the service.
		TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
}

// countingConn counts the bytes written to a connection to the service.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// attempt is what one forwarded request knows about its connection: a
// request that failed before any of its bytes was written was not sent.
type attempt struct {
	conn  *countingConn
	start int64
}

type attemptKey struct{}

func (a *attempt) gotConn(info httptrace.GotConnInfo) {
	c := info.Conn
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if cc, ok := c.(*countingConn); ok {
		a.conn, a.start = cc, cc.written.Load()
	}
}

func (a *attempt) sent() bool { return a.conn != nil && a.conn.written.Load() > a.start }

// upstreamErrorHandler classifies a failed round trip. Nothing sent (the
// connection was refused, DNS failed, nothing was written): the claim is
// released and the client gets 502 upstream-unreachable with Retry-After.
// Sent, but no complete answer (closed before the status line, reset,
// timed out): the outcome is unknown, and the middleware answers per
// --unknown-outcome.
func upstreamErrorHandler(logger *slog.Logger, refuse func(http.ResponseWriter, *http.Request, httpidem.Problem)) func(http.ResponseWriter, *http.Request, error) {
	return func(w http.ResponseWriter, r *http.Request, err error) {
		timeout := isTimeout(err)
		a, _ := r.Context().Value(attemptKey{}).(*attempt)
		if a == nil || !a.sent() {
			logger.Warn("upstream not reached; nothing was sent", "method", r.Method, "path", r.URL.Path, "error", err.Error())
			detail := "nothing was sent to the service; retry after Retry-After seconds"
			if httpidem.NotSent(w) { // a keyed request: its claim is released
				detail = "nothing was sent to the service; retry with the same key after Retry-After seconds"
			}
			p := httpidem.Problem{Type: httpidem.ProblemUpstreamUnreachable, Title: "The service could not be reached", Status: http.StatusBadGateway,
				Detail: detail, RetryAfter: time.Second}
			if timeout {
				p.Status = http.StatusGatewayTimeout
			}
			refuse(w, r, p)
			return
		}
		logger.Warn("upstream answer incomplete: outcome unknown", "method", r.Method, "path", r.URL.Path, "error", err.Error())
		if timeout && !errors.Is(err, httpidem.ErrUpstreamTimeout) {
			err = fmt.Errorf("%w: %w", httpidem.ErrUpstreamTimeout, err)
		}
		if httpidem.OutcomeUnknown(w, err) {
			return
		}
		// Not protected (no key): nothing to hold; say what happened.
		p := httpidem.Problem{Type: httpidem.ProblemOutcomeUnknown, Title: "The outcome of the request is unknown", Status: http.StatusBadGateway,
			Detail: "the request reached the service but no complete answer came back; it may have been executed"}
		if timeout {
			p.Status = http.StatusGatewayTimeout
		}
		refuse(w, r, p)
	}
}

func isTimeout(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
