package httpidem

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/observe"
)

// Header names.
const (
	// DefaultHeader carries the key (draft-ietf-httpapi-idempotency-key-header).
	DefaultHeader = "Idempotency-Key"
	// ReplayedHeader is set to "true" on every replayed response and on no
	// first response.
	ReplayedHeader = "Idempotent-Replayed"
)

// Defaults for Config.
const (
	DefaultMaxBody     = 10 << 20
	DefaultMaxResponse = 8 << 20
	// DefaultStoreRetryAfter is the Retry-After of a 503 when the store
	// fails.
	DefaultStoreRetryAfter = time.Second
)

// DefaultStoreStatus is the default status policy: responses below 500 are
// stored and replayed, except 408, 425 and 429, which say the request was
// not processed. 5xx answers release the claim so that a retry runs again.
func DefaultStoreStatus(status int) bool {
	return status < 500 && !notProcessed(status)
}

// StripeStoreStatus also stores 5xx answers, as Stripe's API does: once the
// handler ran, every retry sees the same answer, even a failure. 408, 425
// and 429 still release the claim.
func StripeStoreStatus(status int) bool { return !notProcessed(status) }

func notProcessed(status int) bool {
	return status == http.StatusRequestTimeout || status == http.StatusTooEarly || status == http.StatusTooManyRequests
}

// Config tunes the middleware. A nil *Config means the defaults.
type Config struct {
	// Methods are the protected methods; others pass through untouched.
	// Default POST and PATCH.
	Methods []string
	// Header is the request header that carries the key. Default
	// Idempotency-Key.
	Header string
	// RequireKey answers 400 to a protected request without a key. When
	// false (the default) such a request passes through unprotected and is
	// counted as "keyless".
	RequireKey bool
	// ScopeFunc decides the scope. Default HeaderScope("Authorization"),
	// whose scheme comparison ignores case and white space.
	ScopeFunc ScopeFunc
	// SharedAnonymousScope puts every keyed request that carries no caller
	// identity (ScopeFunc returns the empty scope) into one shared
	// keyspace. Off by default: such a request is refused with 400
	// scope-required, because one anonymous client would otherwise receive
	// another's stored response when both pick the same key. Turn it on
	// only when keys are unguessable and the responses hold nothing
	// private.
	SharedAnonymousScope bool
	// JSONFingerprint fingerprints a body that is valid JSON by its
	// canonical form (idem.CanonicalJSON), so key order and white space do
	// not make a retry a different request. Other bodies are fingerprinted
	// as sent.
	JSONFingerprint bool
	// FingerprintPointers, when set, make the fingerprint cover only the
	// values these RFC 6901 JSON pointers name in the body ("/amount",
	// "/items/0/sku"; see idem.FingerprintJSONPointers), each in its
	// canonical form, besides the method, path and query, which always
	// count. A retry that changes a field outside them (a timestamp, a
	// trace id) replays the first response; one that changes a field they
	// name is refused with 422 key-reused. A non-empty body that is not
	// valid JSON is refused with 400 body-not-json. A field left out is a
	// field a retry may change and still get the first response: name
	// every field that defines the operation.
	FingerprintPointers []string
	// KeyPointer, when set, is the RFC 6901 JSON pointer of the key in the
	// body ("/request_id"), for APIs whose clients send their key in the
	// payload (AIP-155's request_id). The header still wins when a
	// request has both. A body that carries no key (not JSON, or nothing
	// at the pointer) makes a request without a key, which RequireKey
	// decides as for a request without the header: pass through as
	// "keyless", or 400 body-not-json / missing-key. A value at the
	// pointer that is not a string or a number (its literal text: 12 and
	// 12.0 are two keys) or not a valid key is always 400 invalid-key:
	// the client meant to send one. The key is validated as a header key is (1 to 255
	// visible ASCII characters), and a body key names the same record as
	// the header key with that value. A gzip body is read decoded.
	KeyPointer string
	// MaxBody is the largest request body, in bytes; a larger one is
	// answered 413 and nothing is recorded. Default 10 MiB.
	MaxBody int64
	// MaxResponse is the largest response body that is stored, in bytes.
	// A larger one completes the record as "not replayable" before it is
	// streamed to the first caller (see the package documentation).
	// Default 8 MiB.
	MaxResponse int
	// Lease is how long a claim stays exclusive without renewal; the
	// middleware renews it every third of it while the handler runs.
	// Default idem.DefaultLease (30s).
	Lease time.Duration
	// Retention is how long a record is kept, the window in which retries
	// are recognised. Default idem.DefaultRetention (24h).
	Retention time.Duration
	// StoreStatusFunc decides which statuses are stored; for the others the
	// claim is released so that a retry runs. Default DefaultStoreStatus;
	// StripeStoreStatus also stores 5xx.
	StoreStatusFunc func(status int) bool
	// DropHeaders are response headers that reach the first caller but are
	// not stored, so replays lack them (a per-request trace id, say).
	// Hop-by-hop headers are never stored, nor is Set-Cookie unless
	// KeepHeaders names it: a session cookie handed to every retry would
	// be replayed to whoever holds the key.
	DropHeaders []string
	// KeepHeaders are headers dropped by default (Set-Cookie) that are
	// stored and replayed all the same.
	KeepHeaders []string
	// AtMostOnce marks each claim as started in the store
	// (Store.MarkStarted, one round trip) right before the handler runs. A
	// retry that takes the claim over after its holder died (or lost its
	// lease) and finds the mark does not run the handler: the key is held
	// as outcome-unknown, as with HoldUnknown. Without it such a takeover
	// runs the handler again (it can tell with IsReexecution). It requires
	// UnknownOutcome HoldUnknown. idem proxy sets it in hold mode.
	//
	// The mark is a record in the store: it holds across a failover of
	// the store's database only when that database replicates
	// synchronously (docs/replication.md).
	AtMostOnce bool

	// ResolveFunc, when set, asks the service what became of a request
	// whose key the middleware holds (HoldUnknown: the answer was lost, or
	// a takeover found the claim marked as started): in the background,
	// at once and then with backoff (1s, 2s, … a minute) while the record
	// is held. The question carries what ties the answer to the held
	// request (ResolveQuestion: the caller's scope digest, the request's
	// fingerprint, method and path). "Never happened" releases the key
	// (the next retry runs the request); a 2xx answer becomes the key's
	// result, replayed to every retry, with the headers a first response
	// would not store dropped; both through idem.Resolve at the held
	// record's fence, so a client retry or an operator resolving first
	// wins and the question stops. Any other answer (not a 2xx, a body
	// over MaxResponse, another request's fingerprint) is refused and the
	// key stays held. Every question is logged (Warn when it changed the
	// key or was refused) with its outcome. ResolveURL builds one for a
	// service that answers "GET URL" with the key. The request is never
	// forwarded again by this. Call Middleware.Close to stop the
	// questions.
	ResolveFunc ResolveFunc
	// ResolvedFunc, if set, is told of the outcome of each question
	// ResolveFunc was asked: for a metric
	// (promidem.Held.Resolved("service", …) for ResolveResult and
	// ResolveRelease).
	ResolvedFunc func(outcome ResolveOutcome)
	// WaitTimeout, when positive, makes a duplicate that finds the first
	// request still running wait up to this long for its result (and then
	// replay it) instead of answering 409 at once. Off by default.
	WaitTimeout time.Duration
	// UnknownOutcome decides what a key whose outcome is unknown becomes:
	// HoldUnknown (the default) stores an outcome-unknown problem that
	// every retry gets; ReleaseUnknown lets the next retry run. See
	// OutcomeUnknown.
	UnknownOutcome UnknownOutcomePolicy
	// FailOpen runs the handler without protection when the store cannot
	// be reached, instead of answering 503. Off by default: a store outage
	// must not turn into duplicate executions.
	FailOpen bool
	// Budget bounds the request bytes held in memory at once, shared by
	// every middleware with the same *MemoryBudget: buffered bodies, their
	// gzip-decoded form, and the working memory of JSON canonicalisation
	// and key lookup. A request that finds it full waits briefly, then
	// gets 503 memory-budget with Retry-After (413 if it could never fit);
	// nothing is recorded. Nil: one budget of DefaultMemoryBudget (256
	// MiB) shared by every middleware of the process without one.
	Budget *MemoryBudget
	// StoreTimeout is the deadline of each store call (Begin, the
	// at-most-once mark, Complete, Release, Hold): a store that does not
	// answer within it (a black-holed connection) is unavailable, never a
	// hang. Past it in Begin the request gets 503 store-unavailable with
	// Retry-After before the handler runs; storing the handler's answer
	// past it gets 503 not-stored, and the claim stays until its lease
	// runs out (then, with AtMostOnce, a retry finds the mark and the key
	// is held as outcome-unknown). Storing also runs past the client's
	// cancellation for up to StoreTimeout, so that a client that left
	// finds its result. Default idem.DefaultStoreTimeout (5s). A
	// store that never waits (memstore: see idem.Claimer.StoreTimeout)
	// gets no deadline of its own.
	StoreTimeout time.Duration
	// StoreRetryAfter is the Retry-After of a 503 when the store fails.
	// Default one second.
	StoreRetryAfter time.Duration
	// InFlightRetryAfter caps the Retry-After of a 409: the answer is the
	// time left on the first request's lease (when the key frees up even if
	// its holder died), but most requests finish long before. Default one
	// second.
	InFlightRetryAfter time.Duration
	// Logger receives one line per decision, with the hashed key
	// (idem.Key.String) and the outcome, never the raw key. Executions,
	// replays and keyless requests are logged at Debug, refusals at Info,
	// store failures at Warn. Default slog.Default().
	Logger *slog.Logger
	// SkipFunc, when set, is asked about every request of a protected
	// method before anything else; when it returns true the request passes
	// through untouched, as a request of an unprotected method does (no
	// key is read, nothing is stored), and it is counted and logged as
	// "skipped". For health checks, internal callers, dry runs.
	SkipFunc func(r *http.Request) bool
	// RefusalFunc, when set, writes every answer the middleware makes
	// itself instead of the default RFC 9457 problem+json body (see
	// WriteProblem), for APIs with an error format of their own:
	// StripeRefusal ({"error":{"type","code","message"}}),
	// TemplateRefusal, or a func of one's own. See Problem for what it is
	// given and what it must do.
	RefusalFunc func(w http.ResponseWriter, r *http.Request, p Problem)
	// Observer, when set, is told of each decision, store call and phase:
	// promidem.New gives the Prometheus metrics, otelidem.New
	// OpenTelemetry spans and metrics, observe.ObserverFunc a hook (see
	// observe.Observer). Nil observes nothing.
	Observer observe.Observer
}

func (c *Config) withDefaults() Config {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Methods == nil {
		out.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	if out.Header == "" {
		out.Header = DefaultHeader
	}
	if out.ScopeFunc == nil {
		out.ScopeFunc = HeaderScope("Authorization")
	}
	if out.MaxBody == 0 {
		out.MaxBody = DefaultMaxBody
	}
	if out.MaxResponse == 0 {
		out.MaxResponse = DefaultMaxResponse
	}
	if out.Lease == 0 {
		out.Lease = idem.DefaultLease
	}
	if out.Retention == 0 {
		out.Retention = idem.DefaultRetention
	}
	if out.StoreStatusFunc == nil {
		out.StoreStatusFunc = DefaultStoreStatus
	}
	if out.StoreTimeout == 0 {
		out.StoreTimeout = idem.DefaultStoreTimeout
	}
	if out.StoreRetryAfter == 0 {
		out.StoreRetryAfter = DefaultStoreRetryAfter
	}
	if out.InFlightRetryAfter == 0 {
		out.InFlightRetryAfter = time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out
}

func (c *Config) validate() error {
	bad := func(field, reason string) error {
		return &idem.ConfigError{Package: "httpidem", Field: "Config." + field, Reason: reason}
	}
	switch {
	case c.MaxBody < 0:
		return bad("MaxBody", "must not be negative")
	case c.MaxResponse < 0:
		return bad("MaxResponse", "must not be negative")
	case c.Lease < time.Millisecond:
		return bad("Lease", "must be at least 1ms")
	case c.Retention < c.Lease:
		return bad("Retention", "must be at least the lease")
	case c.WaitTimeout < 0:
		return bad("WaitTimeout", "must not be negative")
	case c.StoreTimeout < 0:
		return bad("StoreTimeout", "must not be negative")
	case c.StoreRetryAfter < 0:
		return bad("StoreRetryAfter", "must not be negative")
	case c.UnknownOutcome > ReleaseUnknown:
		return bad("UnknownOutcome", "must be HoldUnknown or ReleaseUnknown")
	case c.InFlightRetryAfter < 0:
		return bad("InFlightRetryAfter", "must not be negative")
	case !validHeaderName([]byte(c.Header)):
		return bad("Header", fmt.Sprintf("%q is not a valid header name", c.Header))
	}
	for _, m := range c.Methods {
		if !validHeaderName([]byte(m)) {
			return bad("Methods", fmt.Sprintf("%q is not a valid method", m))
		}
	}
	if c.AtMostOnce && c.UnknownOutcome != HoldUnknown {
		return bad("AtMostOnce", "requires UnknownOutcome HoldUnknown: a key whose work may have run is held, not released")
	}
	for _, p := range c.FingerprintPointers {
		if p != "" && p[0] != '/' {
			return bad("FingerprintPointers", fmt.Sprintf("%q is not a JSON pointer: it must be empty or start with /", p))
		}
	}
	if c.KeyPointer != "" && c.KeyPointer[0] != '/' {
		return bad("KeyPointer", fmt.Sprintf("%q is not a JSON pointer: it must start with /", c.KeyPointer))
	}
	for _, h := range c.KeepHeaders {
		if !validHeaderName([]byte(h)) {
			return bad("KeepHeaders", fmt.Sprintf("%q is not a valid header name", h))
		}
	}
	for _, h := range c.DropHeaders {
		if !validHeaderName([]byte(h)) {
			return bad("DropHeaders", fmt.Sprintf("%q is not a valid header name", h))
		}
	}
	return nil
}

// methodSet is a small set of methods; the common ones are compared as
// interned constants.
type methodSet []string

func (s methodSet) has(m string) bool {
	for _, x := range s {
		if x == m {
			return true
		}
	}
	return false
}

func newMethodSet(ms []string) methodSet {
	out := make(methodSet, 0, len(ms))
	for _, m := range ms {
		out = append(out, strings.ToUpper(m))
	}
	return out
}
