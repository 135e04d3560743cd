package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/storeurl"
)

const proxyHelp = `Usage: idem proxy --upstream URL [flags]

idem proxy is an Idempotency-Key sidecar: a reverse proxy in front of any HTTP
service. A protected request (POST and PATCH by default) that carries an
Idempotency-Key reaches the service once; every retry with the same key gets
the stored response back, byte for byte, with "Idempotent-Replayed: true".
A retry while the first request runs gets 409 with Retry-After; the same key
with another method, path, query or body gets 422; 5xx answers and transport
failures are not stored, so the retry runs again; a store outage is a 503 with
Retry-After (fail closed). The key is scoped by --scope-header (a hash of
Authorization by default): one caller's key never replays another's response.

The Idempotency-Key header is forwarded to the service unchanged. Upstream
calls are never cancelled because the client went away: the result is stored
and the client's retry replays it.

WHAT THE PROXY CANNOT DO ALONE: if this process dies after the service acted
but before the result was stored, the claim stays until --lease runs out; a
retry then takes it over and the service runs AGAIN. No layer in front of a
service can close that window. The service's own unique constraint on the
Idempotency-Key (or on a business key) does: make it reject the second run.

SIGTERM or Ctrl-C: the proxy stops accepting connections, lets the requests in
flight finish (up to one minute) and stores their results, then exits.

Flags:
`

// proxyOptions are the parsed flags of idem proxy.
type proxyOptions struct {
	listen       string
	upstream     *url.URL
	store        string
	cache        string
	methods      []string
	requireKey   bool
	retention    time.Duration
	lease        time.Duration
	maxBody      int64
	scopeHeaders []string
	// anonymousShared: --anonymous-scope shared.
	anonymousShared bool
	admin           string
}

// shutdownGrace bounds how long SIGTERM waits for requests in flight.
const shutdownGrace = time.Minute

func parseProxyFlags(args []string, stderr io.Writer) (proxyOptions, error) {
	fs := newFlags("proxy", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), proxyHelp)
		fs.PrintDefaults()
	}
	var o proxyOptions
	var upstream, methods, maxBody, anonymous string
	var scopes stringList
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&upstream, "upstream", "", "the service behind the proxy, e.g. http://127.0.0.1:9000 (required)")
	fs.StringVar(&o.store, "store", "sqlite:idem.db", "record store DSN: memory:, sqlite:PATH, postgres://…, mysql://…, redis://…")
	fs.StringVar(&o.cache, "cache", "", "optional fast layer DSN (redis://…) in front of --store, which makes the store tiered")
	fs.StringVar(&methods, "methods", "POST,PATCH", "protected methods, comma-separated")
	fs.BoolVar(&o.requireKey, "require-key", false, "answer 400 to protected requests without a key (otherwise they pass through unprotected)")
	fs.DurationVar(&o.retention, "retention", 24*time.Hour, "how long records are kept: the window in which retries are recognised")
	fs.DurationVar(&o.lease, "lease", 30*time.Second, "claim lease, renewed while a request runs; after a crash, retries wait this long")
	fs.StringVar(&maxBody, "max-body", "10MiB", "largest request body, e.g. 10MiB, 512KB or 1024 (bytes)")
	fs.Var(&scopes, "scope-header", "request header that forms the scope, set by a trusted gateway; repeatable: all named headers together (default Authorization)")
	fs.StringVar(&anonymous, "anonymous-scope", "reject", "keyed requests without any scope header: reject (400 scope-required) or shared (one keyspace for all anonymous callers)")
	fs.StringVar(&o.admin, "admin", "", "address serving /healthz, /readyz and /metrics (none by default)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageErr("unexpected argument %q", fs.Arg(0))
	}
	if upstream == "" {
		return o, usageErr("--upstream is required")
	}
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return o, usageErr("--upstream %q: want an http:// or https:// URL with a host", redactURL(upstream))
	}
	o.upstream = u
	for m := range strings.SplitSeq(methods, ",") {
		if m = strings.TrimSpace(m); m != "" {
			o.methods = append(o.methods, strings.ToUpper(m))
		}
	}
	if len(o.methods) == 0 {
		return o, usageErr("--methods: no method given")
	}
	if o.maxBody, err = parseSize(maxBody); err != nil {
		return o, usageErr("--max-body: %v", err)
	}
	switch {
	case o.lease < time.Millisecond:
		return o, usageErr("--lease must be at least 1ms")
	case o.retention < o.lease:
		return o, usageErr("--retention must be at least --lease")
	case o.store == "":
		return o, usageErr("--store must not be empty")
	}
	switch anonymous {
	case "reject":
	case "shared":
		o.anonymousShared = true
	default:
		return o, usageErr("--anonymous-scope %q: want reject or shared", anonymous)
	}
	o.scopeHeaders = scopes
	if len(o.scopeHeaders) == 0 {
		o.scopeHeaders = []string{"Authorization"}
	}
	return o, nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("empty header name")
	}
	*l = append(*l, strings.TrimSpace(v))
	return nil
}

// parseSize parses a byte count: a plain number, or one with a unit
// (B, KB, MB, GB: powers of 1000; KiB, MiB, GiB: powers of 1024).
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, fmt.Errorf("%q: want a number of bytes, e.g. 10MiB or 1024", s)
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, err)
	}
	units := map[string]int64{"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
	mult, ok := units[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (use B, KB, MB, GB, KiB, MiB or GiB)", s, strings.TrimSpace(s[i:]))
	}
	if n > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	if n*mult < 1 {
		return 0, fmt.Errorf("%q: must be at least one byte", s)
	}
	return n * mult, nil
}

func redactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	return "(unparsable)"
}

func runProxy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseProxyFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	h, err := openProxyStore(ctx, o, logger)
	if err != nil {
		return err
	}
	defer h.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	handler, err := newProxyHandler(o, h.Store, reg, logger)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	servers := []*http.Server{srv}
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(ln) }()

	adminAddr := ""
	if o.admin != "" {
		aln, err := net.Listen("tcp", o.admin)
		if err != nil {
			srv.Close()
			return fmt.Errorf("--admin: %w", err)
		}
		adminAddr = ", admin http://" + aln.Addr().String()
		asrv := &http.Server{Handler: adminHandler(h, reg), ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, asrv)
		go func() { errc <- asrv.Serve(aln) }()
	}
	cache := ""
	if o.cache != "" {
		if d, err := storeurl.Parse(o.cache); err == nil {
			cache = ", cache " + d.String()
		}
	}
	fmt.Fprintf(stdout, "idem proxy listening on http://%s, upstream %s, store %s%s%s\n",
		ln.Addr(), o.upstream.Redacted(), h.DSN, cache, adminAddr)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	// Stop accepting, let the requests in flight finish and store their
	// results, then return (and close the store).
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	var errs []error
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown: %w", err))
		}
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		errs = append(errs, serveErr)
	}
	if len(errs) == 0 {
		logger.Info("idem proxy stopped")
	}
	return errors.Join(errs...)
}

// openProxyStore opens --store, and --cache in front of it. A cache that
// cannot be reached at startup is not fatal (the durable store judges
// every claim anyway); a cache that is misconfigured (an evicting Redis)
// is.
func openProxyStore(ctx context.Context, o proxyOptions, logger *slog.Logger) (*storeurl.Handle, error) {
	if o.cache == "" {
		return openStore(ctx, o.store)
	}
	sd, err := storeurl.Parse(o.store)
	if err != nil {
		return nil, err
	}
	cd, err := storeurl.Parse(o.cache)
	if err != nil {
		return nil, fmt.Errorf("--cache: %w", err)
	}
	durable, err := storeurl.Open(sd)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := durable.Prepare(pctx); err != nil {
		durable.Close()
		return nil, fmt.Errorf("store %s: %w", sd, err)
	}
	cache, err := storeurl.Open(cd)
	if err != nil {
		durable.Close()
		return nil, fmt.Errorf("--cache: %w", err)
	}
	if err := cache.Prepare(pctx); err != nil {
		if !idem.IsUnavailable(err) {
			cache.Close()
			durable.Close()
			return nil, fmt.Errorf("cache %s: %w", cd, err)
		}
		logger.Warn("cache unreachable at startup; the durable store answers until it returns", "cache", cd.String(), "error", err.Error())
	}
	t, err := storeurl.OpenTiered(cache, durable)
	if err != nil {
		cache.Close()
		durable.Close()
		return nil, err
	}
	return t, nil
}

// newProxyHandler is the sidecar: the middleware in front of a reverse
// proxy to o.upstream.
func newProxyHandler(o proxyOptions, store idem.Store, reg prometheus.Registerer, logger *slog.Logger) (http.Handler, error) {
	mw, err := httpidem.New(store, &httpidem.Config{
		Methods:    o.methods,
		RequireKey: o.requireKey,
		ScopeFunc:  proxyScopeFunc(o.scopeHeaders, o.anonymousShared),
		// proxyScopeFunc already refuses anonymous callers unless shared.
		SharedAnonymousScope: o.anonymousShared,
		MaxBody:              o.maxBody,
		Lease:                o.lease,
		Retention:            o.retention,
		Logger:               logger,
		Registerer:           reg,
	})
	if err != nil {
		return nil, err
	}
	upstream := o.upstream
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConnsPerHost = 256
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(upstream)
			pr.SetXForwarded()
		},
		Transport: transport,
		ErrorLog:  slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		// A transport failure is a 502: not stored, so the claim is
		// released and the client's retry runs again.
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			logger.Warn("upstream request failed", "method", r.Method, "path", r.URL.Path, "error", err.Error())
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, `{"type":"about:blank","title":"Bad Gateway","status":502,"detail":"the upstream service could not be reached"}`)
		},
	}
	// The upstream call is never cancelled because the client went away:
	// the service finishes, the result is stored, the retry replays it.
	detached := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rp.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
	})
	return mw.Handler(detached), nil
}

// proxyScopeFunc returns the scope idem proxy computes for a request: the
// named headers (default Authorization) hashed together by
// httpidem.HeaderScope, with the Authorization scheme compared
// case-insensitively and white space normalised. A request that carries
// none of them is anonymous: unless anonymousShared, the function returns
// an error wrapping httpidem.ErrScopeRequired (the proxy answers 400
// scope-required); with anonymousShared, the empty scope, shared by every
// anonymous caller.
//
// It is the one definition of the proxy's scope: `idem keys` calls it to
// find the record a proxy would use for a request with given headers.
func proxyScopeFunc(scopeHeaders []string, anonymousShared bool) httpidem.ScopeFunc {
	if len(scopeHeaders) == 0 {
		scopeHeaders = []string{"Authorization"}
	}
	hs := httpidem.HeaderScope(scopeHeaders...)
	return func(r *http.Request) (string, error) {
		s, err := hs(r)
		if err == nil && s == "" && !anonymousShared {
			return "", errAnonymous
		}
		return s, err
	}
}

var errAnonymous = fmt.Errorf("%w (none of the scope headers is present)", httpidem.ErrScopeRequired)

// adminHandler serves /healthz (the process answers), /readyz (the store
// answers) and /metrics.
func adminHandler(h *storeurl.Handle, reg *prometheus.Registry) http.Handler {
	probe := idem.MustKey("idem-proxy", "readyz-probe")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if _, err := h.Store.Get(ctx, probe); err != nil && !errors.Is(err, idem.ErrNotFound) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "store not ready: %v\n", h.Wrap(err))
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}
