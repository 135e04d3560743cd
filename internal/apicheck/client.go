package apicheck

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// errBudget is returned once MaxRequests requests were sent.
var errBudget = errors.New("request budget (--max-requests) used up")

// client sends requests to the configured origin only, within the request
// budget and the rate limit, and never follows redirects.
type client struct {
	cfg  *Config
	hc   *http.Client
	sent atomic.Int64

	mu   sync.Mutex
	next time.Time // earliest start of the next request
}

func newClient(cfg *Config) *client {
	tr := &http.Transport{
		Proxy:               nil, // never through an environment proxy: only the URL given
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
	}
	return &client{cfg: cfg, hc: &http.Client{
		Transport:     tr,
		Timeout:       time.Duration(cfg.Timeout),
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (c *client) close() { c.hc.CloseIdleConnections() }

// take charges one request to the budget and waits for the rate limit.
func (c *client) take(ctx context.Context) error { return c.reserve(ctx, 1) }

// reserve charges n simultaneous requests to the budget and the rate
// limit at once, for a burst whose point is to arrive together; their
// requests are sent with prepaid set.
func (c *client) reserve(ctx context.Context, n int) error {
	if c.sent.Add(int64(n)) > int64(c.cfg.MaxRequests) {
		c.sent.Add(int64(-n))
		return errBudget
	}
	interval := time.Duration(float64(time.Second) / c.cfg.Rate)
	c.mu.Lock()
	now := time.Now()
	start := c.next
	if start.Before(now) {
		start = now
	}
	c.next = start.Add(time.Duration(n) * interval)
	c.mu.Unlock()
	if d := time.Until(start); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// request is one request the checks send.
type request struct {
	prepaid bool // charged by reserve
	method  string
	path    string // path and query, on the base URL
	key     string // the raw header value; "" sends none
	body    string
	callerB bool // send the second caller's headers
	// headers, when not nil, replace the caller's headers and the
	// Content-Type (idem replay sends each record's own).
	headers [][2]string
}

// exchange is a request and what came back, kept as evidence.
type exchange struct {
	req     request
	status  int
	header  http.Header
	body    []byte
	err     error
	elapsed time.Duration
	// Where the time went, from the start of the request: the connection
	// (0: not reached), the request written, the first response byte.
	connected, written, firstByte time.Duration
	limit                         time.Duration // --timeout
}

// timedOut reports whether the exchange ended because --timeout passed.
func (e *exchange) timedOut() bool {
	if e.err == nil {
		return false
	}
	if errors.Is(e.err, context.DeadlineExceeded) {
		return true
	}
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

// timing says where the time of an exchange went, for the evidence of a
// failed or slow request.
func (e *exchange) timing() string {
	limit := e.limit
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	var parts []string
	switch {
	case e.connected == 0 && e.err != nil:
		return fmt.Sprintf("no connection after %s", ms(e.elapsed))
	case e.connected > 0:
		parts = append(parts, "connected after "+ms(e.connected))
	}
	if e.written > 0 {
		parts = append(parts, "request written after "+ms(e.written))
	}
	switch {
	case e.firstByte > 0 && e.err != nil:
		parts = append(parts, "response headers after "+ms(e.firstByte), fmt.Sprintf("the body did not end within %s", ms(limit)))
	case e.firstByte > 0:
		parts = append(parts, "first response byte after "+ms(e.firstByte), "done after "+ms(e.elapsed))
	case e.timedOut():
		parts = append(parts, fmt.Sprintf("no response within %s (--timeout)", ms(limit)))
	case e.err != nil:
		parts = append(parts, "failed after "+ms(e.elapsed))
	}
	return strings.Join(parts, ", ")
}

func (e *exchange) ok() bool { return e.err == nil && e.status >= 200 && e.status < 300 }

func (c *client) url(path string) string { return c.cfg.base.String() + path }

// send sends r and reads the whole answer.
func (c *client) send(ctx context.Context, r request) *exchange {
	ex := &exchange{req: r, limit: time.Duration(c.cfg.Timeout)}
	if !r.prepaid {
		if err := c.take(ctx); err != nil {
			ex.err = err
			return ex
		}
	}
	var body io.Reader
	if r.body != "" {
		body = strings.NewReader(r.body)
	}
	hr, err := http.NewRequestWithContext(ctx, r.method, c.url(r.path), body)
	if err != nil {
		ex.err = err
		return ex
	}
	if hr.URL.Host != c.cfg.base.Host || hr.URL.Scheme != c.cfg.base.Scheme {
		ex.err = fmt.Errorf("refusing to send to %s: not the base URL's origin", hr.URL.Host)
		return ex
	}
	hr.Header.Set("User-Agent", "idem-check")
	if r.headers != nil {
		for _, h := range r.headers {
			hr.Header.Add(h[0], h[1])
		}
	} else {
		if r.body != "" {
			hr.Header.Set("Content-Type", c.cfg.ContentType)
		}
		for _, h := range c.callerHeaders(r.callerB) {
			hr.Header.Add(h[0], h[1])
		}
	}
	if r.key != "" {
		hr.Header.Set(c.cfg.KeyHeader, r.key)
	}
	start := time.Now()
	var mu sync.Mutex // the trace's callbacks may run on the transport's goroutines
	var connected, written, firstByte time.Duration
	closed := false
	at := func(d *time.Duration) {
		mu.Lock()
		if !closed && *d == 0 {
			*d = max(time.Since(start), time.Nanosecond)
		}
		mu.Unlock()
	}
	finish := func() {
		mu.Lock()
		closed = true
		ex.connected, ex.written, ex.firstByte = connected, written, firstByte
		mu.Unlock()
		ex.elapsed = time.Since(start)
	}
	hr = hr.WithContext(httptrace.WithClientTrace(hr.Context(), &httptrace.ClientTrace{
		GotConn:              func(httptrace.GotConnInfo) { at(&connected) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { at(&written) },
		GotFirstResponseByte: func() { at(&firstByte) },
	}))
	resp, err := c.hc.Do(hr)
	if err != nil {
		finish()
		ex.err = err
		return ex
	}
	defer resp.Body.Close()
	ex.status, ex.header = resp.StatusCode, resp.Header
	ex.body, ex.err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	finish()
	return ex
}

func (c *client) callerHeaders(b bool) [][2]string {
	if b {
		return c.cfg.other
	}
	return c.cfg.headers
}

// sendRaw writes a request with the given raw key header lines on a fresh
// connection: net/http refuses to send the malformed keys the key checks
// need (control characters, for one).
func (c *client) sendRaw(ctx context.Context, r request, keyLines []string) *exchange {
	ex := &exchange{req: r, limit: time.Duration(c.cfg.Timeout)}
	if err := c.take(ctx); err != nil {
		ex.err = err
		return ex
	}
	host := c.cfg.base.Host
	addr := host
	if _, _, err := net.SplitHostPort(host); err != nil {
		if c.cfg.base.Scheme == "https" {
			addr = net.JoinHostPort(host, "443")
		} else {
			addr = net.JoinHostPort(host, "80")
		}
	}
	d := net.Dialer{Timeout: time.Duration(c.cfg.Timeout)}
	var conn net.Conn
	var err error
	if c.cfg.base.Scheme == "https" {
		conn, err = (&tls.Dialer{NetDialer: &d}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		ex.err = err
		return ex
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Duration(c.cfg.Timeout)))
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s%s HTTP/1.1\r\nHost: %s\r\nUser-Agent: idem-check\r\nConnection: close\r\n", r.method, c.cfg.base.Path, r.path, host)
	for _, h := range c.callerHeaders(r.callerB) {
		fmt.Fprintf(&b, "%s: %s\r\n", h[0], h[1])
	}
	for _, l := range keyLines {
		fmt.Fprintf(&b, "%s: %s\r\n", c.cfg.KeyHeader, l)
	}
	fmt.Fprintf(&b, "Content-Type: %s\r\nContent-Length: %d\r\n\r\n%s", c.cfg.ContentType, len(r.body), r.body)
	start := time.Now()
	ex.connected = time.Nanosecond
	if _, err := conn.Write(b.Bytes()); err != nil {
		ex.err, ex.elapsed = err, time.Since(start)
		return ex
	}
	ex.written = max(time.Since(start), time.Nanosecond)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	ex.elapsed = time.Since(start)
	if err == nil {
		ex.firstByte = ex.elapsed
	}
	if err != nil {
		ex.err = err
		return ex
	}
	defer resp.Body.Close()
	ex.status, ex.header = resp.StatusCode, resp.Header
	ex.body, ex.err = io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return ex
}

// unique returns a fresh random token.
func unique() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// newKey returns a fresh key in the sf-string form of the IETF draft.
func newKey() string { return `"idemcheck-` + unique() + `"` }
