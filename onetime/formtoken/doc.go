// Package formtoken is net/http middleware that protects form submits with
// onetime tokens and answers a repeated submit with the first one's
// response.
//
// The page that renders a form issues a token bound to the session
// (onetime.Tokens.Issue) and puts it in the form; the client sends it in the
// Form-Token header (configurable) with the submit. The first submit spends
// the token and runs the handler; a double click, a browser resend or a
// retry after a timeout presents the same token and gets the stored
// response, byte for byte, with Idempotent-Replayed: true — not an error the
// user cannot make sense of.
//
//	tokens, _ := onetime.New(tokenStore, nil)
//	mw, _ := formtoken.New(tokens, recordStore, &formtoken.Config{
//		ScopeFunc: func(r *http.Request) (string, error) { return "session:" + sessionID(r), nil },
//	})
//	http.Handle("/pay", mw.Handler(payHandler))
//
// # Sections
//
//   - How it works: httpidem keeps the records; the token is their key.
//   - Failures: 5xx and panics give the token back.
//   - Answers: the status of every refusal.
//   - Guarantees.
//
// # How it works
//
// The middleware is built on httpidem: the token is the idempotency key, and
// the scope is the one the token is bound to (prefixed with ScopePrefix, so
// a token's record never meets an Idempotency-Key record in a shared store).
// httpidem claims the record atomically, replays completed submits, makes a
// concurrent duplicate wait for the first one's response (WaitTimeout,
// default 30s), refuses a different body under the same token (422), and
// stores the response before the client sees it. Inside the claim, the
// owner spends the token with onetime.Tokens.Take, as the record's owner
// (onetime.UseFor): the token is the gate, the record the memory.
//
// # Failures
//
// A business failure after the token was spent must not strand the user
// (the counter-example: a CSRF library that burns the token before the
// handler fails, so the user's retry is refused). When the handler answers
// with a status httpidem does not store (5xx, 408, 425, 429 by default;
// HTTP.StoreStatusFunc decides) or panics, the middleware restores the token
// and then httpidem releases the claim: the same token can be submitted
// again and runs once more. If the restore itself fails (the token store
// just went down), the retry still works: the record's next owner has the
// same Use ID and a higher fence, so it re-takes the token.
//
// # Answers
//
//	no token, malformed header                   400 (httpidem missing-key / invalid-key)
//	ScopeFunc error or empty scope               403 scope-rejected
//	unknown or forged token                      403 unknown-token
//	token of another session                     403 wrong-scope
//	token expired                                403 token-expired
//	token spent outside this middleware          409 token-used
//	repeat of a completed submit                 the stored response, Idempotent-Replayed: true
//	repeat while the first runs                  waits, then the stored response (409 after WaitTimeout)
//	same token, other method, path or body       422 (httpidem key-reused)
//	token store or record store unavailable      503 + Retry-After; nothing is spent
//
// Refusals of a token (403, 409) are 4xx answers, which httpidem stores like
// any other: repeating the same token replays the refusal. Methods outside
// Config.Methods (GET, HEAD, OPTIONS by default) pass through untouched.
//
// # Guarantees
//
//   - One run per token: the record's claim admits one owner at a time, the
//     token store admits one spender; N concurrent submits with one token
//     run the handler once and all get its response.
//   - Crash: a process that dies after spending the token leaves the record
//     claimed; after its lease the resubmit takes it over, re-takes the token
//     and runs the handler again (httpidem's crash window: make the
//     handler's own writes conditional, or complete in the same
//     transaction). Tested by SIGKILLing a process mid-request. If the
//     token expired before the lease ran out, the resubmit is refused with
//     403 token-expired instead: a re-take never outlives the token.
//   - Retention: the record must outlive the token (New refuses a
//     HTTP.Retention shorter than the token TTL plus a minute), so a submit
//     after the record is gone finds the token expired, never re-takable.
//   - Outages fail closed (503); clocks are the stores' (see onetime and
//     httpidem).
package formtoken
