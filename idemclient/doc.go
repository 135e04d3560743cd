// Package idemclient is the client half of idempotency: an
// http.RoundTripper that retries a request only in ways a server that
// deduplicates (httpidem, idem proxy, Stripe-style APIs) makes harmless.
//
// A client that times out cannot tell whether its POST was executed, so it
// must retry; a retry without a key is a second charge. The Transport
// gives each logical request one key and sends every attempt with it, so
// the server runs it once and answers the others with the stored result.
//
//	tr, err := idemclient.New(nil) // wraps http.DefaultTransport
//	if err != nil { … }
//	client := &http.Client{Transport: tr}
//	resp, err := client.Post(url, "application/json", body)
//
// It depends on the standard library only (and on the root package idem,
// itself standard library only, for *idem.ConfigError, the error New
// reports a bad Config with). docs/client.md has the full
// rules, the figures of the chaos runs and the browser helper
// (idemclient/browser).
//
// # Keys
//
// POST and PATCH (Config.Methods) get a new key per logical request: 128
// random bits from crypto/rand (Config.NewKeyFunc). A business key that
// must survive a restart of the process (an order number) is given
// through the context with WithKey; it keys any method. A request that
// already carries the header is sent with its own value. The key goes in
// Config.Header ("Idempotency-Key") as an RFC 8941 sf-string ("k", the
// IETF draft's spelling) or Bare (k, Stripe's), Config.Spelling. Key(resp)
// returns the key a response answers; Replayed(resp) reports a stored
// answer sent again (Idempotent-Replayed: true).
//
// # What is retried, with the same key
//
//	transport errors, also after the request was written   retried
//	no response headers within Config.AttemptTimeout       retried
//	409 in-flight (or any 409 with Retry-After)            retried after Retry-After
//	429, 503                                               retried after Retry-After (or backoff)
//	502 / 504 upstream-unreachable                         retried after Retry-After
//	502 / 504 outcome-unknown                              never: *OutcomeUnknownError with the key
//	400, 401, 403, 404, 422, other 4xx, 500, plain 502/504  never: the answer is returned
//	2xx, 3xx                                               returned (Replayed tells a replay)
//
// A request whose method is not keyed and that has no key is retried only
// when its method is safe by RFC 9110 (GET, HEAD, OPTIONS, TRACE); a PUT
// or DELETE without a key is sent once, untouched.
//
// # When retrying stops
//
// Each retry waits the server's Retry-After (up to Config.MaxRetryAfter)
// or an exponential backoff with full jitter (Config.BaseDelay,
// Config.MaxDelay). Retrying stops at Config.MaxAttempts attempts, when
// the next attempt would start after Config.MaxElapsed, when the context's
// deadline would pass during the wait (the deadline always wins: the
// Transport never sleeps into it), or when the retry budget is empty.
// Then the caller gets:
//
//   - the last answer as it is (a 503 with its Retry-After), when no
//     attempt can have reached the service;
//   - an *OutcomeUnknownError carrying the key, when one may have (a
//     connection that broke after the request was written, an attempt
//     timeout, a 409 in-flight): look the operation up, or retry later
//     with the same key (WithKey);
//   - a *RetryError after transport errors that never reached the
//     service (refused connections).
//
// Errors match the reason with errors.Is: ErrBudgetExhausted,
// ErrAttemptsExhausted, ErrElapsedExhausted, ErrRetryAfterTooLong,
// ErrBodyNotReplayable, or the context's error.
//
// # Retry budget
//
// A Budget is a token bucket shared by every request of a Transport (or
// of several): requests earn Ratio tokens, each retry spends one. Retries
// never exceed Capacity + Ratio × requests, so in a total outage a client
// makes at most (1 + Ratio) × requests + Capacity attempts (1.1 per
// request with the defaults) and a fleet cannot turn an outage into a
// retry storm.
//
// # Bodies
//
// A body is sent again through Request.GetBody (set by http.NewRequest for
// *bytes.Buffer, *bytes.Reader and *strings.Reader bodies), or else
// buffered up to Config.MaxBufferedBody (1 MiB). A longer body without
// GetBody is streamed once and the request is not retried: its failure is
// an error matching ErrBodyNotReplayable (an *OutcomeUnknownError when it
// may have reached the service).
//
// # Observing
//
// Config.Observer sees every attempt with the decision that follows
// (done, retry, give up, outcome unknown) and its reason, and every wait.
// otelidem.ClientObserver records them as events on the request's span.
//
// # What it does not do
//
// The Transport makes retries safe only against a server that
// deduplicates on the key. A server without it runs every attempt.
// Nothing is kept across processes: a key that must outlive the process
// is the caller's (WithKey).
package idemclient
