// Package httpidem is net/http middleware that makes retried POSTs harmless:
// a request carrying an Idempotency-Key runs once, and every retry with the
// same key gets the first response back, byte for byte, marked
// Idempotent-Replayed: true.
//
// A payment client times out, cannot tell whether the charge happened, and
// retries with the same key. Without protection the customer pays twice.
// With it, the retry either finds the first request still running (409 and
// Retry-After), or finds its stored response and gets it again, without the
// handler running a second time.
//
//	mw, err := httpidem.New(store, nil) // store: sqlstore, redisstore, tiered, memstore
//	if err != nil { … }
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// # Semantics
//
// The table this package implements (docs/http.md has it with the proxy's
// rows):
//
//	case                                                 answer
//	method not protected (only POST and PATCH are)       pass through
//	protected, SkipFunc returns true                     pass through, counted "skipped"
//	protected, no key, RequireKey                        400 missing-key
//	protected, no key, key not required                  pass through, counted "keyless"
//	key empty, > 255 chars, not visible ASCII, 2 lines   400 invalid-key / multiple-keys
//	keyed, no caller identity (empty scope)              400 scope-required (unless SharedAnonymousScope)
//	keyed, asks for a protocol Upgrade                   400 upgrade-not-protected
//	KeyPointer, no header, no key in the body            as "no key" above (RequireKey: 400 body-not-json / missing-key)
//	KeyPointer, no header, a bad value at the pointer    400 invalid-key
//	FingerprintPointers, body not JSON                   400 body-not-json
//	first request                                        executed; status, headers, body stored
//	retry, same request, completed                       stored response + Idempotent-Replayed: true
//	same key, other method, path, query or body          422 key-reused
//	same key while the first is running                  409 in-flight + Retry-After (or wait: WaitTimeout)
//	same key, completed, response was not storable       410 response-not-replayable (never re-run)
//	5xx, 408, 425, 429, panic before writing, NotSent    not stored: claim released, the retry runs
//	OutcomeUnknown, or panic after writing               outcome unknown: 502/504, held (default) or released
//	takeover of a started claim (AtMostOnce)             held as outcome-unknown, never re-run
//	request body over MaxBody (decoded, for gzip)        413, nothing recorded
//	store unreachable, or silent past StoreTimeout       503 store-unavailable + Retry-After
//	result not stored (store failed or silent)           503 result-not-stored; the claim waits out its lease
//	the process's memory budget full (Config.Budget)     503 memory-budget + Retry-After, nothing recorded
//
// The Retry-After of a 409 is the time left on the first request's lease,
// capped by Config.InFlightRetryAfter (one second by default): the lease
// bounds the wait if the first request's process died, but most requests
// finish long before it.
//
// Every refusal is an RFC 9457 application/problem+json body with a stable
// type URI (the Problem… constants; problems.md documents each), unless
// Config.RefusalFunc writes it in the API's own format (StripeRefusal,
// TemplateRefusal, or one's own): it gets the Problem (status, type and
// its Name, title, detail, Retry-After), and the middleware has already
// set Retry-After, Idempotent-Retryable (whether retrying can help) and
// Cache-Control: no-store, which carry the answer's meaning whatever the
// body's format. Stored answers are not refusals: replays are sent as
// stored, and so is the held outcome-unknown answer, which RefusalFunc
// wrote once when it was stored. Config.SkipFunc lets chosen requests of a protected
// method through untouched (counted "skipped").
//
// The key header value is an RFC 8941 sf-string ("…"); a bare value is
// accepted too and names the same key (see ParseKey; FormatKey gives the
// one canonical spelling). The fingerprint covers method, escaped path, raw
// query and body (SHA-256), or the canonical JSON body with
// JSONFingerprint, or only the JSON values that FingerprintPointers name
// (RFC 6901, "/amount"; method, path and query still count); a
// Content-Encoding: gzip body is fingerprinted on its decoded content, at
// most MaxBody bytes of it (a zip bomb gets 413). KeyPointer reads the key
// from the JSON body of a request without the key header ("/request_id";
// the header wins when both are there); it is validated as a header key
// is. docs/http.md has the details.
//
// # Scope
//
// The scope (ScopeFunc, default HeaderScope("Authorization"): the auth
// scheme compared case-insensitively, white space normalised; a value
// without a space is a bare credential, compared byte for byte; an empty or
// white-space-only value is no identity) is hashed
// with the key, so one caller's key never replays or reveals another
// caller's response: the same key from two callers names two unrelated
// records, and refusals carry nothing caller-specific. A keyed request with
// no identity (the empty scope, or ErrScopeRequired) is refused with 400
// scope-required, unless SharedAnonymousScope puts every anonymous caller
// in one keyspace. A replay never reaches the handler's authentication: the
// scope must identify the caller as surely as that would, and a refreshed
// token is a new scope.
//
// # Unknown outcomes
//
// A handler that cannot tell whether its work happened (its own call to
// another service timed out after sending) calls OutcomeUnknown; one that
// knows nothing started calls NotSent. A panic after the handler started
// its answer is an unknown outcome too. Config.UnknownOutcome decides:
// HoldUnknown (default) stores a 502 (504 after a timeout) outcome-unknown
// problem that every retry gets replayed; ReleaseUnknown releases the
// claim. With AtMostOnce the claim is marked (Store.MarkStarted) right
// before the handler runs, and a takeover of a marked claim (its holder
// died) is held as outcome-unknown instead of running again; without it, a
// handler that runs after a takeover sees IsReexecution. idem proxy uses
// all of this: see docs/http.md.
//
// A handler whose steps (package step) return a *step.UnknownError passes
// it to OutcomeUnknown: the held record then names the step and the steps
// finished before it (StoredResponse.Step), and Config.ResolveFunc's
// question carries it (ResolveQuestion.Step; ResolveURL sends
// Idempotency-Step and refuses an answer for another step).
//
// # Responses
//
// The handler's response is buffered until Complete has stored it: a result
// reaches the client only once a retry can replay it. If the store fails at
// that moment the client gets 503 result-not-stored, never a success it
// could not see again.
//
// Stored: the status, the headers minus hop-by-hop headers, trailers and
// Config.DropHeaders, and the body, in a versioned binary encoding that later
// releases keep reading. Content-Type (sniffed as net/http would) and
// Content-Length are fixed before storing, so the first answer and every
// replay are the same bytes. Headers that outer middleware set on the
// ResponseWriter are not stored; they are set again on replay.
//
// Streaming and large responses: Flush is absorbed while buffering. When the
// body grows past MaxResponse (default 8 MiB), or past the store's own
// limit, the record is completed with a "not replayable" marker holding the
// status and headers BEFORE any byte reaches the client; the response then
// streams (Flush works from there on). A retry of such a key gets 410
// response-not-replayable with the original status (a status clients do
// not retry): it is never executed again, because a completed operation
// must not run twice for want of a stored body. (A status that is not
// stored streams without a marker and releases the claim.) Hijack returns
// ErrHijackProtected: a hijacked connection has no response to store;
// serve upgrades on unprotected methods. 1xx informational responses are
// dropped. Set-Cookie is not stored unless KeepHeaders names it. Trailers
// are sent after the first response's body, never stored (replays have
// none) and never merged into the header block.
//
// # Lease and completion
//
// A heartbeat renews the claim every third of Config.Lease while the handler
// runs, so a slow request keeps its claim as long as its process lives. The
// heartbeat, Complete and Release run on a context detached from the
// client's (context.WithoutCancel): a client that disconnects mid-request
// finds its result stored when it retries. Each store call is bounded all
// the same, by Config.StoreTimeout (5s by default): a store that stops
// answering costs a request a few timeouts, never a hang.
//
// Request bytes held in memory (buffered and gzip-decoded bodies, JSON
// canonicalisation and key lookup) are charged to one budget per process
// (Config.Budget, DefaultMemoryBudget); see docs/http.md. The handler's own context is
// cancelled when the client leaves (as net/http does) and when the lease is
// lost; idem.FenceFromContext returns the claim's fencing token.
//
// # Guarantees
//
// What holds:
//
//   - At most one handler runs per (scope, key) at a time, across every
//     process that shares the store: the store decides atomically.
//   - Every success a client sees is stored: a retry gets the same bytes.
//   - A store outage answers 503 (fail closed) unless FailOpen is set.
//
// What does not:
//
//   - Crash: a process that dies after the handler acted but before
//     Complete leaves a claim that a retry takes over once the lease runs
//     out (409 until then). With AtMostOnce the takeover does not run the
//     handler again: the key is held as outcome-unknown (a client or an
//     operator resolves it). Without it the handler runs again (it sees
//     IsReexecution); the business data's own unique constraint on the
//     key, or completing in the same transaction (sqlstore.CompleteTx),
//     closes that window. The fencing token lets the handler's own writes
//     shut out a stale owner.
//   - Store outage at Complete: the client gets 503; the claim stays until
//     its lease runs out, then a retry runs the handler again.
//   - Clock jump: leases and expiry use the store's clock, and the heartbeat
//     measures with this process's monotonic clock, so a wall-clock jump on
//     the web server changes nothing. A jump of the store's clock shortens
//     or lengthens leases and retention accordingly.
//
// # Observability
//
// httpidem imports no metrics or tracing library. Config.Observer (an
// observe.Observer, the type every idem adapter reports to) is told of
// every decision, every store call and every phase of a keyed request,
// and the implementations live in their own packages, so that a service
// links only what it exports to:
//
//   - promidem: the Prometheus metrics idem_http_requests_total{outcome}
//     and idem_http_store_duration_seconds{op} (idem proxy serves them on
//     /metrics);
//   - otelidem: OpenTelemetry spans for the decision, the work and the
//     completion, children of the request's span (the handler's spans nest
//     under the work span), and the same two metrics;
//   - observe.ObserverFunc: a hook on decisions, for audit and alerts, in
//     one line; observe.Observers combines several observers.
//
// The decisions (observe.Decision, the outcome label): executed, released,
// replayed, in_flight, mismatch, rejected, store_error, keyless,
// not_replayable, fail_open, canceled, outcome_unknown and skipped; each
// protected request gets exactly one, and a request whose claim is
// granted gets acquired before it. The store ops (idem.StoreMethod): begin,
// complete, release, mark_started.
//
// Why two interfaces rather than a metrics sink: a counter or a hook needs
// only observe.Observer's Decided and StoreCall; a span needs a start, an end, and
// a context that the handler inherits, so PhaseObserver.StartPhase
// returns the phase's context and an end func. The middleware checks for
// PhaseObserver once, in New: a counter costs no per-phase work, and
// without an Observer the middleware makes none of these calls and
// allocates nothing for them.
// Observers see the key's digest and its hashed short form
// (idem.Key.String), never the raw key.
//
// One slog line per decision carries the outcome and the hashed key,
// never the raw key.
package httpidem
