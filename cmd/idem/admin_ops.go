package main

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemkit/idem"
)

// The operations page and its JSON API, on the admin listener beside
// /metrics:
//
//	GET  /ops                          the page (held and in-flight keys)
//	GET  /ops/api/keys                 ?state=waiting|held|in_progress
//	                                   &min_age=30s&request=…&scope=…&step=…&limit=N
//	GET  /ops/api/keys/{digest}        one record, decoded
//	GET  /ops/api/replication          the store's replication (docs/replication.md)
//	POST /ops/api/keys/{digest}/resolve
//	     {"fence":N, "release":true} or
//	     {"fence":N, "status":201, "headers":{"Content-Type":["…"]},
//	      "body":"…" | "body_base64":"…"}
//	     and "step":"NAME" to resolve only a key held in that step
//
// A key held in a step of an operation of steps (package step) names it:
// "step" and "steps_finished" in its JSON, "held in step NAME" on the
// page; step=NAME lists the keys held in that step.
//
// Reads are open to whoever reaches the admin listener (like /metrics:
// keep it off public networks). Writes need the admin token
// (--admin-token, IDEM_ADMIN_TOKEN) as "Authorization: Bearer TOKEN", a
// JSON body, and a same-origin request: a post whose Origin is another
// host, or whose Sec-Fetch-Site is cross-site or same-site, is refused, so
// a page elsewhere cannot make an operator's browser resolve keys. With no
// token configured the page is read-only.

//go:embed ops/ops.html
var opsHTML []byte

//go:embed ops/ops.js
var opsJS []byte

//go:embed ops/ops.css
var opsCSS []byte

// minAdminToken is the shortest admin token accepted.
const minAdminToken = 16

// resolutionCounter counts resolutions (promidem.Held and otelidem.Held).
type resolutionCounter interface{ Resolved(by, how string) }

type opsHandler struct {
	store idem.Store
	token string
	// hosts are the names allowed in Host besides loopback names and IP
	// literals (--admin-host).
	hosts []string
	count resolutionCounter // nil: none
	log   *slog.Logger
	// replication reads the store's replication (storeurl.Handle's);
	// nil or !ok: the store cannot tell.
	replication func(ctx context.Context) (idem.Replication, bool, error)
	allowAsync  bool

	// authFailures counts refused tokens (nil: not counted);
	// authLog rate-limits their log lines.
	authFailures prometheus.Counter
	authLog      rateLimitedLog
}

// registerMetrics adds the admin listener's counters to reg.
func (o *opsHandler) registerMetrics(reg prometheus.Registerer) error {
	o.authFailures = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "idem_admin_auth_failures_total",
		Help: "Writes to the operations API (/ops) refused for a missing or wrong admin token.",
	})
	return reg.Register(o.authFailures)
}

func (o *opsHandler) register(mux *http.ServeMux) {
	static := func(body []byte, ctype string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			h := w.Header()
			h.Set("Content-Type", ctype)
			h.Set("Cache-Control", "no-store")
			h.Set("X-Content-Type-Options", "nosniff")
			h.Set("X-Frame-Options", "DENY")
			h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
			h.Set("Referrer-Policy", "no-referrer")
			_, _ = w.Write(body)
		}
	}
	mux.HandleFunc("GET /ops", o.hostChecked(static(opsHTML, "text/html; charset=utf-8")))
	mux.HandleFunc("GET /ops/ops.js", o.hostChecked(static(opsJS, "text/javascript; charset=utf-8")))
	mux.HandleFunc("GET /ops/ops.css", o.hostChecked(static(opsCSS, "text/css; charset=utf-8")))
	mux.HandleFunc("GET /ops/api/keys", o.hostChecked(o.list))
	mux.HandleFunc("GET /ops/api/keys/{digest}", o.hostChecked(o.get))
	mux.HandleFunc("POST /ops/api/keys/{digest}/resolve", o.hostChecked(o.resolve))
	mux.HandleFunc("GET /ops/api/replication", o.hostChecked(o.replicationAnswer))
	// Anything else under /ops (a 404 or 405) is host-checked too, so
	// that a rebinding page learns nothing from the status codes.
	mux.HandleFunc("/ops/", o.hostChecked(http.NotFound))
}

// hostChecked answers 421 to a request whose Host is neither a loopback
// name, an IP literal, nor one of the --admin-host names. A page on
// another site that rebinds its own name to this listener's address
// (DNS rebinding) sends its own name as Host and is refused, so it cannot
// read records even when no token is configured. An IP literal cannot be
// rebound: a page at http://10.0.0.5:9090/ is this listener's own origin.
func (o *opsHandler) hostChecked(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !o.hostAllowed(r.Host) {
			apiError(w, http.StatusMisdirectedRequest, "this Host is not the admin listener's: start the proxy with --admin-host NAME to reach /ops by that name")
			return
		}
		next(w, r)
	}
}

func (o *opsHandler) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if host == "" {
		return false
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return true
	}
	return slices.Contains(o.hosts, host)
}

// rateLimitedLog lets one log line through per interval and counts the
// others, which the next line reports.
type rateLimitedLog struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// authLogInterval is the shortest time between two log lines about refused
// admin tokens.
const authLogInterval = 10 * time.Second

// allow reports whether a line may be logged now and how many were
// suppressed since the last one.
func (l *rateLimitedLog) allow(now time.Time) (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.last.IsZero() && now.Sub(l.last) < authLogInterval {
		l.suppressed++
		return false, 0
	}
	n := l.suppressed
	l.last, l.suppressed = now, 0
	return true, n
}

// replicationView is the answer of GET /ops/api/replication.
type replicationView struct {
	Mode     string `json:"mode"` // "single server", "synchronous", "asynchronous replicas", "unknown"
	Replicas int    `json:"replicas"`
	Waits    int    `json:"waits"`
	Detail   string `json:"detail"`
	// RefusesClaims: asynchronous and not allowed; the store answers 503.
	RefusesClaims bool `json:"refuses_claims"`
}

func (o *opsHandler) replicationAnswer(w http.ResponseWriter, r *http.Request) {
	if o.replication == nil {
		apiError(w, http.StatusNotImplemented, "this store cannot read its replication")
		return
	}
	ctx, cancel := o.ctx(r)
	defer cancel()
	rep, ok, err := o.replication(ctx)
	switch {
	case !ok:
		apiError(w, http.StatusNotImplemented, "this store cannot read its replication")
	case err != nil:
		apiError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeJSON(w, http.StatusOK, replicationView{Mode: rep.Mode.String(), Replicas: rep.Replicas, Waits: rep.Waits, Detail: rep.Detail,
			RefusesClaims: refusesClaims(rep, o.allowAsync)})
	}
}

// apiError answers with {"error": msg}.
func apiError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func (o *opsHandler) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 10*time.Second)
}

type listAnswer struct {
	Writable bool         `json:"writable"`
	State    string       `json:"state"`
	Count    int          `json:"count"`
	Keys     []recordView `json:"keys"`
}

func (o *opsHandler) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	l, ok := o.store.(lister)
	if !ok {
		apiError(w, http.StatusNotImplemented, "this store cannot list its records")
		return
	}
	var states []idem.State
	state := q.Get("state")
	switch state {
	case "", "waiting":
		state, states = "waiting", []idem.State{idem.StateHeld, idem.StateInProgress}
	case "held":
		states = []idem.State{idem.StateHeld}
	case "in_progress":
		states = []idem.State{idem.StateInProgress}
	default:
		apiError(w, http.StatusBadRequest, "state: want waiting, held or in_progress")
		return
	}
	var minAge time.Duration
	if s := q.Get("min_age"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			if n, nerr := strconv.ParseFloat(s, 64); nerr == nil {
				d, err = time.Duration(n*float64(time.Second)), nil
			}
		}
		if err != nil || d < 0 {
			apiError(w, http.StatusBadRequest, "min_age: want a duration (30s, 5m) or seconds")
			return
		}
		minAge = d
	}
	limit := 200
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 || n > 10000 {
			apiError(w, http.StatusBadRequest, "limit: want 1 to 10000")
			return
		}
		limit = n
	}
	request, scope, step := q.Get("request"), strings.ToLower(q.Get("scope")), q.Get("step")
	ctx, cancel := o.ctx(r)
	defer cancel()
	var recs []idem.Record
	for _, st := range states {
		rs, err := l.List(ctx, st, false, limit)
		if err != nil {
			apiError(w, http.StatusServiceUnavailable, "listing the store: "+err.Error())
			return
		}
		recs = append(recs, rs...)
	}
	slices.SortFunc(recs, func(a, b idem.Record) int { return b.CreatedAt.Compare(a.CreatedAt) })
	now := time.Now()
	out := listAnswer{Writable: o.token != "", State: state, Keys: []recordView{}}
	for _, v := range heldDetails(ctx, o.store, recs, now) {
		if v.Expired || time.Duration(v.AgeSeconds*float64(time.Second)) < minAge ||
			(request != "" && !strings.Contains(v.Request, request)) ||
			(scope != "" && !strings.HasPrefix(v.ScopeDigest, scope)) ||
			(step != "" && v.Step != step) {
			continue
		}
		if len(out.Keys) == limit {
			break
		}
		out.Keys = append(out.Keys, v)
	}
	out.Count = len(out.Keys)
	writeJSON(w, http.StatusOK, out)
}

func (o *opsHandler) find(w http.ResponseWriter, r *http.Request) (idem.Record, bool) {
	ctx, cancel := o.ctx(r)
	defer cancel()
	rec, err := findByDigest(ctx, o.store, r.PathValue("digest"))
	switch {
	case errors.Is(err, idem.ErrNotFound):
		apiError(w, http.StatusNotFound, "no record with that digest")
	case errors.Is(err, errUsage):
		apiError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
	case errors.Is(err, errAmbiguous):
		apiError(w, http.StatusConflict, strings.TrimPrefix(err.Error(), errAmbiguous.Error()+": "))
	case err != nil:
		apiError(w, http.StatusServiceUnavailable, err.Error())
	default:
		return rec, true
	}
	return rec, false
}

func (o *opsHandler) get(w http.ResponseWriter, r *http.Request) {
	rec, ok := o.find(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, newRecordView(rec, true, time.Now()))
}

// writeAllowed checks a write: a token is configured and given, and the
// request comes from the page's own origin.
func (o *opsHandler) writeAllowed(w http.ResponseWriter, r *http.Request) bool {
	if o.token == "" {
		apiError(w, http.StatusForbidden, "read-only: start the proxy with --admin-token (or IDEM_ADMIN_TOKEN) to resolve keys here")
		return false
	}
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		apiError(w, http.StatusForbidden, "cross-site request refused")
		return false
	}
	if origin := r.Header.Get("Origin"); origin != "" {
		u, err := url.Parse(origin)
		if err != nil || u.Host != r.Host {
			apiError(w, http.StatusForbidden, "cross-origin request refused")
			return false
		}
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		apiError(w, http.StatusUnsupportedMediaType, "want a JSON body (Content-Type: application/json)")
		return false
	}
	// The scheme is case-insensitive (RFC 9110, 11.1): "bearer" is Bearer.
	scheme, got, _ := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(o.token)) != 1 {
		o.authFailed(r, scheme)
		w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
		apiError(w, http.StatusUnauthorized, "the admin token is missing or wrong")
		return false
	}
	return true
}

// authFailed counts a refused token and logs it, one line per
// authLogInterval at most (a guessing loop must not flood the log); the
// line says how many were not logged since the last one. The token given
// is never logged.
func (o *opsHandler) authFailed(r *http.Request, scheme string) {
	if o.authFailures != nil {
		o.authFailures.Inc()
	}
	ok, suppressed := o.authLog.allow(time.Now())
	if !ok || o.log == nil {
		return
	}
	why := "wrong token"
	switch {
	case r.Header.Get("Authorization") == "":
		why = "no Authorization header"
	case !strings.EqualFold(scheme, "Bearer"):
		why = "not a Bearer token"
	}
	o.log.LogAttrs(r.Context(), slog.LevelWarn, "operations API: admin token refused",
		slog.String("reason", why), slog.String("remote", r.RemoteAddr),
		slog.String("path", r.URL.Path), slog.Int("not_logged_since_last", suppressed))
}

type resolveRequest struct {
	Fence      uint64      `json:"fence"`
	Release    bool        `json:"release"`
	Status     int         `json:"status"`
	Headers    http.Header `json:"headers"`
	Body       *string     `json:"body"`
	BodyBase64 *string     `json:"body_base64"`
	// Step: resolve only if the key is held in this step.
	Step string `json:"step"`
}

func (o *opsHandler) resolve(w http.ResponseWriter, r *http.Request) {
	if !o.writeAllowed(w, r) {
		return
	}
	var req resolveRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if req.Fence == 0 {
		apiError(w, http.StatusBadRequest, "fence: required, the fence of the held record you looked at")
		return
	}
	var body []byte
	bodySet := req.Body != nil || req.BodyBase64 != nil
	switch {
	case req.Body != nil && req.BodyBase64 != nil:
		apiError(w, http.StatusBadRequest, "body and body_base64 are exclusive")
		return
	case req.Body != nil:
		body = []byte(*req.Body)
	case req.BodyBase64 != nil:
		b, err := base64.StdEncoding.DecodeString(*req.BodyBase64)
		if err != nil {
			apiError(w, http.StatusBadRequest, "body_base64: "+err.Error())
			return
		}
		body = b
	}
	rec, ok := o.find(w, r)
	if !ok {
		return
	}
	if rec.Fence != req.Fence {
		apiError(w, http.StatusConflict, fmt.Sprintf("the record changed since you looked at it (fence %d, now %d): nothing was replaced", req.Fence, rec.Fence))
		return
	}
	res, err := resolution(rec, req.Step, req.Release, req.Status, req.Headers, body, bodySet)
	switch {
	case errors.Is(err, errNotHeldRecord), errors.Is(err, errStepMismatch):
		apiError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		apiError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return
	}
	ctx, cancel := o.ctx(r)
	defer cancel()
	if err := idem.Resolve(ctx, o.store, res); err != nil {
		if errors.Is(err, idem.ErrNotHeld) {
			apiError(w, http.StatusConflict, "the record changed since you looked at it: nothing was replaced")
			return
		}
		apiError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	how := "result"
	if res.Release {
		how = "release"
	}
	if o.count != nil {
		o.count.Resolved("operator", how)
	}
	now := time.Now()
	replaced := newRecordView(rec, true, now)
	attrs := []slog.Attr{slog.String("key", rec.Digest.String()[:16]), slog.Uint64("fence", rec.Fence), slog.String("resolution", how),
		slog.String("remote", r.RemoteAddr)}
	if replaced.Step != "" {
		attrs = append(attrs, slog.String("step", replaced.Step))
	}
	o.log.LogAttrs(ctx, slog.LevelWarn, "held key resolved by an operator", attrs...)
	out := map[string]any{"replaced": replaced, "released": res.Release}
	if after, err := idem.Lookup(ctx, o.store, rec.Digest); err == nil {
		out["result"] = newRecordView(after, true, now)
	}
	writeJSON(w, http.StatusOK, out)
}

// adminServer is the admin listener's server: timeouts on every phase of a
// connection, so that idle or stalled connections are closed, and a cap on
// the connections served at once (--admin-max-conns): past it, new ones
// wait in the listen queue, so that the admin listener cannot take the file
// descriptors the proxied traffic needs.
func adminServer(h http.Handler, ln net.Listener, o proxyOptions, logger *slog.Logger) (*http.Server, net.Listener) {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, o.adminIdleTimeout),
		ReadTimeout:       60 * time.Second, // a resolve body is at most 64 MiB
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       o.adminIdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}, &capListener{Listener: ln, slots: make(chan struct{}, o.adminMaxConns)}
}

// capListener accepts a connection only while fewer than cap(slots) it
// accepted are open.
type capListener struct {
	net.Listener
	slots chan struct{}
	done  chan struct{} // closed by Close
	once  sync.Once     // makes done
	shut  sync.Once     // closes done
}

func (l *capListener) init() {
	l.once.Do(func() { l.done = make(chan struct{}) })
}

func (l *capListener) Accept() (net.Conn, error) {
	l.init()
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &capConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *capListener) Close() error {
	l.init()
	l.shut.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// capConn gives its slot back once, on the first Close.
type capConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
