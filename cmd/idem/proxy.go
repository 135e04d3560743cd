package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/promidem"
)

const proxyHelp = `Usage: idem proxy --upstream URL [flags]

idem proxy is an Idempotency-Key sidecar: a reverse proxy in front of any HTTP
service. A protected request (POST and PATCH by default) that carries an
Idempotency-Key reaches the service at most once; every retry with the same
key gets the stored response back, byte for byte, with "Idempotent-Replayed:
true". A retry while the first request runs gets 409 with Retry-After; the
same key with another method, path, query or body gets 422; 5xx answers are
not stored (unless --store-5xx), so the retry runs again; a store outage is a
503 with Retry-After (fail closed).

SCOPE. A key belongs to its caller: the Authorization header by default
(scheme case-insensitive, white space normalised), or the headers named by
--scope-header, which a trusted gateway must set (and strip from clients): a
replay never reaches the service's own authentication. A keyed request with
none of them gets 400 scope-required, unless --anonymous-scope shared.

UNKNOWN OUTCOMES. When the service could not be reached (nothing was sent)
the claim is released and the client gets 502 upstream-unreachable with
Retry-After. When the request was sent but no complete answer came back
(connection closed or reset, or --upstream-timeout passed) the outcome is
unknown and the request is never sent again by the proxy itself. With
--unknown-outcome hold (the default) the client gets 502 (504 after a
timeout) outcome-unknown, and so does every retry with that key: look the
operation up, or knowingly use a new key. With release, the next retry runs
again: only for services that deduplicate on the forwarded key themselves.

AT MOST ONCE, EVEN WHEN KILLED. In hold mode the proxy marks the claim as
forwarded in the store (one write) before the request goes out. If this
process dies after that, a retry that takes the claim over after --lease
does not forward again: the key is held as outcome-unknown, for the client
or an operator ("idem keys") to resolve. In release mode the takeover sends
the request again, with "Idempotency-Reexecution: true", and only the
service's own unique constraint on the key can reject the second run.

The key is forwarded to the service as the client sent it (k stays k, "k"
stays "k"; idem treats both as one key, and a service that deduplicates on
the key should compare them parsed, as httpidem.ParseKey does). Upstream calls are not
cancelled because the client went away: the result is stored and the
client's retry replays it.

REPLICATION. The promise above rests on the store keeping every record it
acknowledged, also across a failover of a replicated database or Redis:
that holds only with synchronous replication and an HA manager that
promotes only a synchronous replica, and fences the old primary before
clients switch (docs/replication.md). The proxy logs the store's
replication at start and /readyz shows it. A SQL store whose server has
asynchronous replicas refuses to grant claims (503, /readyz not ready)
unless --allow-async-replication: a failover may then run an acknowledged
key again. --synchronous-commit (PostgreSQL: on or remote_apply) is the
level the store pins on each of its writes, whatever the DSN says.

SIGTERM or Ctrl-C: the proxy stops accepting connections, lets the requests in
flight finish (bounded by --upstream-timeout) and stores their results, then
exits. Every store call has a deadline (--store-timeout, default 5s): a store
that stops answering gets the request 503 store-unavailable with Retry-After
before the service is called, or 503 not-stored once the service answered
(the claim then stays until its lease runs out; in hold mode a retry after
that finds the mark and gets outcome-unknown), never a hang, also during a
SIGTERM.

RECORDING. --record FILE writes every keyed request of a protected method to
FILE as NDJSON (method, path, query, body, key, timing, a digest of the
scope, the response status), for 'idem replay'. Credentials never reach the
file: Authorization and every --scope-header header are replaced by a
placeholder per caller ({{authorization-1}}). The file rotates at
--record-max-size (FILE.1 … FILE.N, --record-keep).

Every flag can also be set by an environment variable: IDEM_ and the flag's
name in capitals with - as _ (IDEM_UPSTREAM, IDEM_STORE, IDEM_SCOPE_HEADER=
"X-Tenant,X-User" for repeatable flags). A flag on the command line wins.

Flags:
`

// proxyOptions are the parsed flags of idem proxy.
type proxyOptions struct {
	allowAsyncReplication bool
	synchronousCommit     string
	waitReplicas          int
	waitTimeout           time.Duration

	listen       string
	upstream     *url.URL
	store        string
	table        string
	cache        string
	methods      []string
	requireKey   bool
	retention    time.Duration
	lease        time.Duration
	maxBody      int64
	memoryBudget int64
	maxResponse  int64
	scopeHeaders []string
	// anonymousShared: --anonymous-scope shared.
	anonymousShared bool
	admin           string
	adminToken      string
	resolveURL      string
	// held counts held keys and their resolutions (runProxy sets it).
	held     *promidem.Held
	clientJS string // --client-js: the path idem.js is served at
	// refusal writes the proxy's own answers (--error-format; nil:
	// problem+json).
	refusal func(http.ResponseWriter, *http.Request, httpidem.Problem)

	// The admin listener: names allowed in the Host of /ops requests
	// besides loopback and IP literals (--admin-host), how long an idle
	// connection is kept, and how many connections it serves at once.
	adminHosts       []string
	adminIdleTimeout time.Duration
	adminMaxConns    int

	unknownOutcome      httpidem.UnknownOutcomePolicy
	upstreamTimeout     time.Duration
	upstreamIdleTimeout time.Duration
	store5xx            bool
	wait                time.Duration
	jsonFingerprint     bool
	dropHeaders         []string
	keepHeaders         []string
	logLevel            slog.Level
	logJSON             bool

	readHeaderTimeout time.Duration
	readTimeout       time.Duration
	writeTimeout      time.Duration
	storeTimeout      time.Duration
	idleTimeout       time.Duration
	maxHeaderBytes    int64

	// --record FILE (idem replay's input), its size cap and rotated files.
	record     string
	recordMax  int64
	recordKeep int
	// --record-raw-keys: the recording keeps keys as sent (default: a
	// keyed digest).
	recordRawKeys bool
}

// memoryOverhead is what the proxy needs besides its --memory-budget (the
// runtime, connections, store clients, responses being stored): the soft
// memory limit is the budget plus this, unless GOMEMLIMIT is set.
const memoryOverhead = 64 << 20

// shutdownMargin is added to --upstream-timeout to bound SIGTERM's wait for
// the requests in flight (their results must still be stored).
const shutdownMargin = 5 * time.Second

func parseProxyFlags(args []string, stderr io.Writer) (proxyOptions, error) {
	return parseProxyFlagsEnv(args, os.LookupEnv, stderr)
}

func parseProxyFlagsEnv(args []string, env func(string) (string, bool), stderr io.Writer) (proxyOptions, error) {
	fs := newFlags("proxy", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), proxyHelp)
		printFlags(fs.Output(), fs)
	}
	var o proxyOptions
	var memoryBudget string
	var upstream, methods, maxBody, maxResponse, maxHeader, anonymous, unknown, logLevel, logFormat string
	var scopes, drops, keeps stringList
	fs.StringVar(&o.listen, "listen", "127.0.0.1:8080", "address to listen on")
	fs.StringVar(&upstream, "upstream", "", "the service behind the proxy, e.g. http://127.0.0.1:9000 (required)")
	fs.StringVar(&o.store, "store", defaultStore, "record store `DSN`: memory: (in hold mode a restart forgets the forwarded marks: use a durable store for at-most-once across crashes), sqlite:PATH, postgres://…, mysql://…, redis://…")
	fs.StringVar(&o.table, "table", "", "the records `table` of an SQL --store (default "+defaultTable+"; the proxy also creates TABLE_migrations; idem migrate and idem keys read IDEM_TABLE); the schema is the DSN's: postgres://…/db?search_path=SCHEMA, or the MySQL database")
	fs.StringVar(&o.cache, "cache", "", "optional fast layer `DSN` (redis://…) in front of --store, which makes the store tiered")
	fs.BoolVar(&o.allowAsyncReplication, "allow-async-replication", false, "let the store grant claims while its server replicates asynchronously: a failover may then lose acknowledged records and run their keys again (docs/replication.md)")
	fs.StringVar(&o.synchronousCommit, "synchronous-commit", "", "PostgreSQL store: the synchronous_commit `level` pinned on each of its writes, on or remote_apply (default on; the DSN's own setting cannot weaken it)")
	fs.IntVar(&o.waitReplicas, "wait-replicas", 0, "Redis store: the number of replicas each write that decides a claim or a result waits for (WAIT, pipelined with the write); a write fewer replicas acknowledged is answered 503 (docs/replication.md)")
	fs.DurationVar(&o.waitTimeout, "wait-timeout", 0, "Redis store with --wait-replicas: how long each write waits for its replicas (default 1s)")
	fs.StringVar(&methods, "methods", "POST,PATCH", "protected methods, comma-separated")
	fs.BoolVar(&o.requireKey, "require-key", false, "answer 400 to protected requests without a key (otherwise they pass through unprotected)")
	fs.DurationVar(&o.retention, "retention", 24*time.Hour, "how long records are kept: the window in which retries are recognised")
	fs.DurationVar(&o.lease, "lease", 30*time.Second, "claim lease, renewed while a request runs; after a crash, retries wait this long")
	fs.StringVar(&maxBody, "max-body", "10MiB", "largest request body (decoded, for gzip bodies), e.g. 10MiB, 512KB or 1024 (bytes)")
	fs.StringVar(&memoryBudget, "memory-budget", "256MiB", "bound on the request bytes held in memory at once, for the whole process: buffered bodies, gzip-decoded bodies and JSON work; a request that finds it full waits up to 1s, then gets 503 memory-budget with Retry-After")
	fs.StringVar(&maxResponse, "max-response", "8MiB", "largest response body stored for replay; a larger one streams and its key answers 410 response-not-replayable")
	fs.Var(&scopes, "scope-header", "request header that forms the scope, set by a trusted gateway; repeatable: all named headers together (default Authorization)")
	fs.StringVar(&anonymous, "anonymous-scope", "reject", "keyed requests without any scope header: reject (400 scope-required) or shared (one keyspace for all anonymous callers)")
	fs.StringVar(&unknown, "unknown-outcome", "hold", "request sent, no complete answer: hold (store and replay outcome-unknown; never forward the key again) or release (the next retry runs)")
	fs.DurationVar(&o.upstreamTimeout, "upstream-timeout", 60*time.Second, "bound on the wait for the service's response headers and on the whole exchange; past it: 504 and --unknown-outcome")
	fs.DurationVar(&o.storeTimeout, "store-timeout", idem.DefaultStoreTimeout, "deadline of each call to the store; past it: 503 store-unavailable before the service is called, or 503 not-stored after it answered (never a hang)")
	fs.DurationVar(&o.upstreamIdleTimeout, "upstream-idle-timeout", 4*time.Second, "how long an idle connection to the service is kept; keep it below the service's own keep-alive timeout")
	fs.BoolVar(&o.store5xx, "store-5xx", false, "store and replay 5xx answers too (Stripe's behaviour); 408, 425 and 429 still release")
	fs.DurationVar(&o.wait, "wait", 0, "a duplicate that finds the first request running waits up to this long for its result instead of getting 409 (0: off)")
	fs.BoolVar(&o.jsonFingerprint, "json-fingerprint", false, "fingerprint JSON bodies by their canonical form (key order and white space do not count)")
	fs.Var(&drops, "drop-header", "response header sent to the first caller but not stored (a trace id); repeatable")
	fs.Var(&keeps, "keep-header", "response header stored although it is dropped by default (Set-Cookie); repeatable")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error (debug logs every decision)")
	fs.StringVar(&logFormat, "log-format", "text", "text or json")
	fs.DurationVar(&o.readHeaderTimeout, "read-header-timeout", 10*time.Second, "bound on reading a request's headers")
	fs.DurationVar(&o.readTimeout, "read-timeout", 60*time.Second, "bound on reading a whole request, body included")
	fs.DurationVar(&o.writeTimeout, "write-timeout", 0, "bound on answering a request, from the end of its headers (0: --read-timeout + --upstream-timeout + 3 × --store-timeout + 10s)")
	fs.DurationVar(&o.idleTimeout, "idle-timeout", 120*time.Second, "how long an idle client connection is kept")
	fs.StringVar(&maxHeader, "max-header-bytes", "64KiB", "largest request header block")
	var recordMax string
	fs.StringVar(&o.record, "record", "", "record keyed requests to this NDJSON `file`, for idem replay; credentials are replaced by placeholders")
	fs.StringVar(&recordMax, "record-max-size", "64MiB", "rotate the --record file when it would pass this size")
	fs.IntVar(&o.recordKeep, "record-keep", 3, "rotated --record files kept (FILE.1 … FILE.N); 0 keeps none")
	fs.BoolVar(&o.recordRawKeys, "record-raw-keys", false, "keep the idempotency keys in the --record file as sent (default: a digest keyed by a secret of the process, which still groups each caller's retries)")
	fs.StringVar(&o.admin, "admin", "", "address serving /healthz, /readyz, /metrics and the operations page /ops (none by default)")
	fs.StringVar(&o.adminToken, "admin-token", "", "token that lets /ops resolve held keys (at least 16 characters; prefer the environment variable IDEM_ADMIN_TOKEN); without it /ops is read-only")
	var adminHosts stringList
	fs.Var(&adminHosts, "admin-host", "host name the operations page /ops is reached by, besides localhost and IP addresses (a request naming another Host gets 421: DNS rebinding); repeatable")
	fs.DurationVar(&o.adminIdleTimeout, "admin-idle-timeout", 30*time.Second, "how long an idle connection to --admin is kept (and the longest wait for a request's headers, at most 10s)")
	fs.IntVar(&o.adminMaxConns, "admin-max-conns", 64, "connections --admin serves at once; more wait to be accepted, so the admin listener cannot exhaust the process's file descriptors")
	fs.StringVar(&o.resolveURL, "resolve-url", "", "ask the service what became of a held key: GET this `URL` with the Idempotency-Key, the scope headers, the scope digest, the request line and its fingerprint; only a 2xx (or never-happened) settles the key (docs/http.md); none by default")
	var errorFormat string
	fs.StringVar(&errorFormat, "error-format", "problem", "shape of the proxy's own refusals: problem (RFC 9457 problem+json), stripe ({\"error\":{\"type\",\"code\",\"message\"}} with Stripe-Should-Retry), or template:`FILE` (a Go text/template of httpidem.Problem, answered as application/json)")
	fs.StringVar(&o.clientJS, "client-js", "", "serve the browser helper idem.js (docs/client.md) at this path, e.g. /_idem/idem.js (none by default)")
	if err := parseFlags(fs, args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, usageErr("unexpected argument %q", fs.Arg(0))
	}
	if err := applyEnv(fs, env); err != nil {
		return o, err
	}
	if upstream == "" {
		return o, usageErr("--upstream is required")
	}
	if o.table != "" && !sqlIdentifier.MatchString(o.table) {
		return o, usageErr("--table %q: want a plain SQL identifier ([A-Za-z_][A-Za-z0-9_]*, at most 48 characters); the schema is set in the DSN", o.table)
	}
	if o.resolveURL != "" {
		if ru, err := url.Parse(o.resolveURL); err != nil || (ru.Scheme != "http" && ru.Scheme != "https") || ru.Host == "" {
			return o, usageErr("--resolve-url: want an http:// or https:// URL with a host")
		}
	}
	refusal, err := parseErrorFormat(errorFormat)
	if err != nil {
		return o, err
	}
	o.refusal = refusal
	if o.adminToken = strings.TrimSpace(o.adminToken); o.adminToken != "" && len(o.adminToken) < minAdminToken {
		return o, usageErr("--admin-token: at least %d characters", minAdminToken)
	}
	if o.adminIdleTimeout <= 0 {
		return o, usageErr("--admin-idle-timeout: want a positive duration")
	}
	if o.adminMaxConns <= 0 {
		return o, usageErr("--admin-max-conns: want a positive number")
	}
	for _, hn := range adminHosts {
		if strings.ContainsAny(hn, "/ \t@") {
			return o, usageErr("--admin-host %q: want a host name, e.g. idem-admin.internal", hn)
		}
		o.adminHosts = append(o.adminHosts, strings.ToLower(strings.TrimSuffix(hn, ".")))
	}
	u, err := url.Parse(upstream)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		shown := redactURL(upstream)
		if err != nil && !strings.Contains(upstream, "@") {
			shown = upstream // unparsable, and no credentials in it: say what was typed
		}
		hint := ""
		if !strings.Contains(upstream, "://") {
			if hu, err := url.Parse("http://" + upstream); err == nil && hu.Host != "" {
				hint = fmt.Sprintf("; did you mean %q?", hu.Redacted())
			}
		}
		return o, usageErr("--upstream %q: want an http:// or https:// URL with a host%s", shown, hint)
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
	if o.memoryBudget, err = parseSize(memoryBudget); err != nil || o.memoryBudget <= 0 {
		return o, usageErr("--memory-budget: %v", cmp.Or(err, errors.New("must be positive")))
	}
	if o.maxResponse, err = parseSize(maxResponse); err != nil || o.maxResponse > 1<<31 {
		return o, usageErr("--max-response: %v", cmp.Or(err, errors.New("at most 2GiB")))
	}
	if o.maxHeaderBytes, err = parseSize(maxHeader); err != nil || o.maxHeaderBytes > 1<<30 {
		return o, usageErr("--max-header-bytes: %v", cmp.Or(err, errors.New("at most 1GiB")))
	}
	if o.recordMax, err = parseSize(recordMax); err != nil {
		return o, usageErr("--record-max-size: %v", err)
	}
	if o.recordKeep < 0 {
		return o, usageErr("--record-keep must not be negative")
	}
	switch anonymous {
	case "reject":
	case "shared":
		o.anonymousShared = true
	default:
		return o, usageErr("--anonymous-scope %q: want reject or shared", anonymous)
	}
	switch unknown {
	case "hold":
		o.unknownOutcome = httpidem.HoldUnknown
	case "release":
		o.unknownOutcome = httpidem.ReleaseUnknown
	default:
		return o, usageErr("--unknown-outcome %q: want hold or release", unknown)
	}
	switch o.synchronousCommit {
	case "", "on", "remote_apply":
	default:
		return o, usageErr("--synchronous-commit %q: want on or remote_apply (a weaker level acknowledges records a failover can lose)", o.synchronousCommit)
	}
	if o.synchronousCommit != "" {
		if sd, err := parseStoreDSN(o.store); err == nil && sd.Kind != storeurl.Postgres {
			return o, usageErr("--synchronous-commit applies to a PostgreSQL --store only (the store is %s)", sd)
		}
	}
	if o.waitReplicas < 0 || o.waitReplicas > 64 {
		return o, usageErr("--wait-replicas %d: want 0 to 64", o.waitReplicas)
	}
	if o.waitTimeout < 0 || (o.waitTimeout > 0 && o.waitReplicas == 0) {
		return o, usageErr("--wait-timeout applies with a positive --wait-replicas and must not be negative")
	}
	if o.waitReplicas > 0 {
		if sd, err := parseStoreDSN(o.store); err == nil && sd.Kind != storeurl.Redis {
			return o, usageErr("--wait-replicas applies to a Redis --store only (the store is %s; a SQL store's replication is its server's, docs/replication.md)", sd)
		}
	}
	if o.cache != "" {
		cd, err := storeurl.Parse(o.cache)
		if err != nil {
			return o, usageErr("--cache: %v", err)
		}
		if cd.Kind != storeurl.Redis {
			return o, usageErr("--cache %s: the cache must be a Redis DSN (redis://… or rediss://…); a single store goes in --store", cd)
		}
	}
	if err := o.logLevel.UnmarshalText([]byte(logLevel)); err != nil {
		return o, usageErr("--log-level %q: want debug, info, warn or error", logLevel)
	}
	switch logFormat {
	case "text":
	case "json":
		o.logJSON = true
	default:
		return o, usageErr("--log-format %q: want text or json", logFormat)
	}
	if o.writeTimeout == 0 {
		o.writeTimeout = o.readTimeout + o.upstreamTimeout + 3*o.storeTimeout + 10*time.Second
	}
	switch {
	case o.lease < time.Millisecond:
		return o, usageErr("--lease must be at least 1ms")
	case o.retention < o.lease:
		return o, usageErr("--retention must be at least --lease")
	case o.store == "":
		return o, usageErr("--store must not be empty")
	case o.upstreamTimeout <= 0:
		return o, usageErr("--upstream-timeout must be positive")
	case o.storeTimeout <= 0:
		return o, usageErr("--store-timeout must be positive")
	case o.upstreamIdleTimeout <= 0:
		return o, usageErr("--upstream-idle-timeout must be positive")
	case o.wait < 0:
		return o, usageErr("--wait must not be negative")
	case o.readHeaderTimeout <= 0 || o.readTimeout <= 0 || o.idleTimeout <= 0:
		return o, usageErr("--read-header-timeout, --read-timeout and --idle-timeout must be positive")
	case o.writeTimeout <= o.upstreamTimeout:
		return o, usageErr("--write-timeout (%v) must be longer than --upstream-timeout (%v): the answer could never be written", o.writeTimeout, o.upstreamTimeout)
	}
	if o.clientJS != "" && !strings.HasPrefix(o.clientJS, "/") {
		return o, usageErr("--client-js %q: want a path starting with /", o.clientJS)
	}
	o.scopeHeaders = scopes
	if len(o.scopeHeaders) == 0 {
		o.scopeHeaders = []string{"Authorization"}
	}
	o.dropHeaders, o.keepHeaders = drops, keeps
	return o, nil
}

// applyEnv sets every flag that was not given on the command line from
// its environment variable (IDEM_UPSTREAM for --upstream), if set. A
// repeatable flag takes a comma-separated list.
func applyEnv(fs *flag.FlagSet, env func(string) (string, bool)) error {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || given[f.Name] {
			return
		}
		name := envName(f.Name)
		v, ok := env(name)
		if !ok {
			return
		}
		values := []string{v}
		if _, list := f.Value.(*stringList); list {
			values = strings.Split(v, ",")
		}
		for _, v := range values {
			if e := fs.Set(f.Name, strings.TrimSpace(v)); e != nil {
				err = usageErr("%s=%q: %s", name, v, envExpectation(f, e))
				return
			}
		}
	})
	return err
}

// envExpectation says what an environment variable for f must hold, for
// the error about a value that did not parse (err).
func envExpectation(f *flag.Flag, err error) string {
	if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
		return "want true or false (also accepted: 1, 0, t, f, T, F, TRUE, FALSE, True, False)"
	}
	if _, ok := f.Value.(interface{ Get() any }); ok {
		if _, isDur := f.Value.(interface{ Get() any }).Get().(time.Duration); isDur {
			example := f.DefValue
			if example == "0s" {
				example = "30s"
			}
			return fmt.Sprintf("want a duration such as %q (a number with a unit: ms, s, m, h)", example)
		}
	}
	return err.Error()
}

// envName is the environment variable of a flag: IDEM_SCOPE_HEADER for
// scope-header.
func envName(flagName string) string {
	return "IDEM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
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
	hopts := &slog.HandlerOptions{Level: o.logLevel}
	var lh slog.Handler = slog.NewTextHandler(stderr, hopts)
	if o.logJSON {
		lh = slog.NewJSONHandler(stderr, hopts)
	}
	logger := slog.New(lh)
	if _, set := os.LookupEnv("GOMEMLIMIT"); !set {
		// The budget bounds the request bytes held; the soft limit makes
		// the garbage collector give back what requests let go of before
		// the heap doubles past it.
		debug.SetMemoryLimit(o.memoryBudget + memoryOverhead)
	}
	h, err := openProxyStore(ctx, o, logger)
	if err != nil {
		return err
	}
	defer h.Close()
	// A store that was unreachable at startup is prepared (schema, Redis
	// check) when it answers; until then every protected request gets 503
	// and /readyz says not ready. A store that answers but is unfit (an
	// evicting Redis, a failed migration) stops the proxy.
	var prepared atomic.Bool
	prepared.Store(h.Prepared)
	prepc := make(chan error, 1)
	pctx, stopPrepare := context.WithCancel(ctx)
	defer stopPrepare()
	if !h.Prepared {
		go func() { prepc <- prepareWhenUp(pctx, h.Handle, o.allowAsyncReplication, logger, &prepared) }()
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	l, _ := h.Store.(lister)
	if o.held, err = promidem.NewHeld(reg, l, nil); err != nil {
		return err
	}
	handler, err := newProxyHandler(o, h.Store, reg, logger)
	if err != nil {
		return err
	}
	if o.record != "" {
		rec, err := newRecorder(o.record, o.recordMax, o.recordKeep, o, logger)
		if err != nil {
			return err
		}
		defer rec.Close()
		handler = rec.wrap(handler)
	}
	handler = withClientJS(handler, o.clientJS)
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: o.readHeaderTimeout,
		ReadTimeout:       o.readTimeout,
		WriteTimeout:      o.writeTimeout,
		IdleTimeout:       o.idleTimeout,
		MaxHeaderBytes:    int(o.maxHeaderBytes),
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
		ah, err := adminHandler(h.Handle, reg, prepared.Load, o, logger)
		if err != nil {
			srv.Close()
			aln.Close()
			return err
		}
		asrv, aln := adminServer(ah, aln, o, logger)
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
	if h.Prepared {
		logReplication(ctx, h.Handle, o.allowAsyncReplication, logger)
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	case serveErr = <-prepc:
	}
	stopPrepare()
	// Stop accepting, let the requests in flight finish and store their
	// results, then return (and close the store). No upstream call lasts
	// longer than --upstream-timeout, and no request makes more than three
	// store calls in turn (begin, mark, complete), each bounded by
	// --store-timeout: every client waiting on a hung store is answered
	// before the process exits.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.upstreamTimeout+3*o.storeTimeout+shutdownMargin)
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

// proxyStore is the proxy's store, and whether it is prepared (schema,
// Redis check): a store unreachable at startup is not, yet.
type proxyStore struct {
	*storeurl.Handle
	Prepared bool
}

// openProxyStore opens --store, and --cache in front of it. A store or
// cache that cannot be reached at startup is not fatal: a sidecar often
// starts before its database. The cache is skipped (the durable store
// judges every claim anyway); an unreachable store answers 503 until it
// comes up, and runProxy prepares it then. A store or cache that answers
// but is unfit (an evicting Redis) is fatal.
func openProxyStore(ctx context.Context, o proxyOptions, logger *slog.Logger) (proxyStore, error) {
	sd, err := parseStoreDSN(o.store)
	if err != nil {
		return proxyStore{}, err
	}
	if o.table != "" && sd.Kind != storeurl.SQLite && sd.Kind != storeurl.Postgres && sd.Kind != storeurl.MySQL {
		return proxyStore{}, usageErr("--table applies to an SQL store (sqlite:, postgres://, mysql://), not %s", sd)
	}
	sd.Table = o.table
	if sd.Kind == storeurl.SQLite {
		if err := checkSQLiteFile(sd, true); err != nil {
			return proxyStore{}, err
		}
	}
	durable, err := storeurl.OpenWith(sd, storeurl.Options{AllowAsyncReplication: o.allowAsyncReplication, SynchronousCommit: o.synchronousCommit,
		WaitReplicas: o.waitReplicas, WaitTimeout: o.waitTimeout})
	if err != nil {
		return proxyStore{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	prepared := true
	if err := durable.Prepare(pctx); err != nil {
		if !idem.IsUnavailable(err) || ctx.Err() != nil {
			durable.Close()
			return proxyStore{}, fmt.Errorf("store %s: %w", sd, err)
		}
		prepared = false
		logger.Warn("store unreachable at startup; protected requests get 503 until it answers", "store", sd.String(), "error", err.Error())
	}
	if o.cache == "" {
		return proxyStore{durable, prepared}, nil
	}
	cd, err := storeurl.Parse(o.cache)
	if err != nil {
		durable.Close()
		return proxyStore{}, fmt.Errorf("--cache: %w", err)
	}
	// The cache's replicas need no waiting: every first claim is judged
	// by the durable store, which decides what a failover keeps.
	cache, err := storeurl.OpenWith(cd, storeurl.Options{AllowAsyncReplication: true})
	if err != nil {
		durable.Close()
		return proxyStore{}, fmt.Errorf("--cache: %w", err)
	}
	if err := cache.Prepare(pctx); err != nil {
		if !idem.IsUnavailable(err) {
			cache.Close()
			durable.Close()
			return proxyStore{}, fmt.Errorf("cache %s: %w", cd, err)
		}
		logger.Warn("cache unreachable at startup; the durable store answers until it returns", "cache", cd.String(), "error", err.Error())
	}
	t, err := storeurl.OpenTiered(cache, durable)
	if err != nil {
		cache.Close()
		durable.Close()
		return proxyStore{}, err
	}
	return proxyStore{t, prepared}, nil
}

// prepareWhenUp retries h.Prepare until it succeeds (then sets prepared and
// returns nil), fails for another reason than unavailability (returned: the
// proxy stops), or ctx ends. The wait between tries grows from 250 ms to 5 s.
func prepareWhenUp(ctx context.Context, h *storeurl.Handle, allowAsync bool, logger *slog.Logger, prepared *atomic.Bool) error {
	wait := 250 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := h.Prepare(pctx)
		cancel()
		switch {
		case err == nil:
			prepared.Store(true)
			logger.Info("store ready", "store", h.DSN.String())
			logReplication(ctx, h, allowAsync, logger)
			// Keep the proxy running: block until it stops.
			<-ctx.Done()
			return nil
		case ctx.Err() != nil:
			return nil
		case !idem.IsUnavailable(err):
			return fmt.Errorf("store %s: %w", h.DSN, err)
		}
		wait = min(2*wait, 5*time.Second)
	}
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
// answers, and was prepared: prepared reports it), /metrics and the
// operations page (/ops, admin_ops.go).
func adminHandler(h *storeurl.Handle, reg *prometheus.Registry, prepared func() bool, o proxyOptions, logger *slog.Logger) (http.Handler, error) {
	probe := idem.MustKey("idem-proxy", "readyz-probe")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if !prepared() {
			w.WriteHeader(http.StatusServiceUnavailable)
			// A store whose server check refuses its replication (redisstore's
			// Check) stays unprepared: say why rather than "unreachable".
			if rep, ok, err := h.Replication(ctx); ok && err == nil && refusesClaims(rep, o.allowAsyncReplication) {
				fmt.Fprintf(w, "%s\nreplication: %v\n", asyncRefusalLine, rep)
				return
			}
			io.WriteString(w, "store not ready: unreachable since startup (schema or server check pending)\n")
			return
		}
		if _, err := h.Store.Get(ctx, probe); err != nil && !errors.Is(err, idem.ErrNotFound) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "store not ready: %v\n", h.Wrap(err))
			return
		}
		rep, ok, err := h.Replication(ctx)
		switch {
		case !ok:
			io.WriteString(w, "ready\n")
		case err != nil:
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "store not ready: reading its replication: %v\n", err)
		case refusesClaims(rep, o.allowAsyncReplication):
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "%s\nreplication: %v\n", asyncRefusalLine, rep)
		default:
			fmt.Fprintf(w, "ready\nreplication: %v\n", rep)
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ops := &opsHandler{store: h.Store, token: o.adminToken, hosts: o.adminHosts, log: logger, replication: h.Replication, allowAsync: o.allowAsyncReplication}
	if o.held != nil {
		ops.count = o.held
	}
	if err := ops.registerMetrics(reg); err != nil {
		return nil, err
	}
	ops.register(mux)
	return mux, nil
}

// refusesClaims reports whether a store with replication rep refuses to
// grant claims: its server replicates asynchronously and the operator did
// not allow it. (sqlstore refuses; the proxy's readiness follows.)
// asyncRefusalLine is /readyz's answer while the store refuses claims
// because its server replicates asynchronously.
const asyncRefusalLine = "store not ready: it refuses claims, its server has asynchronous replicas (a failover may lose acknowledged records; docs/replication.md, --allow-async-replication, or --wait-replicas for Redis)"

func refusesClaims(rep idem.Replication, allowAsync bool) bool {
	return rep.Mode == idem.ReplicationAsynchronous && !allowAsync
}

// logReplication logs the store's replication once it is prepared: info
// for a single server or synchronous replication, a warning when it is
// unknown, allowed asynchronous, or asynchronous and refused.
func logReplication(ctx context.Context, h *storeurl.Handle, allowAsync bool, logger *slog.Logger) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, ok, err := h.Replication(rctx)
	switch {
	case !ok:
		return
	case err != nil:
		logger.Warn("store replication not read", "store", h.DSN.String(), "error", err.Error())
	case refusesClaims(rep, allowAsync):
		logger.Warn("store replication: asynchronous replicas; the store refuses to grant claims until commits wait for a replica or --allow-async-replication is set (docs/replication.md)",
			"store", h.DSN.String(), "mode", rep.Mode.String(), "replicas", rep.Replicas, "detail", rep.Detail)
	case rep.Mode == idem.ReplicationAsynchronous:
		logger.Warn("store replication: asynchronous replicas, allowed by --allow-async-replication: a failover may lose acknowledged records and run their keys again (docs/replication.md)",
			"store", h.DSN.String(), "mode", rep.Mode.String(), "replicas", rep.Replicas, "detail", rep.Detail)
	case rep.Mode == idem.ReplicationUnknown:
		logger.Warn("store replication unknown: the store could not read it; a failover keeps acknowledged records only with synchronous replication (docs/replication.md)",
			"store", h.DSN.String(), "mode", rep.Mode.String(), "detail", rep.Detail)
	default:
		logger.Info("store replication", "store", h.DSN.String(), "mode", rep.Mode.String(), "replicas", rep.Replicas, "waits", rep.Waits, "detail", rep.Detail)
	}
}
