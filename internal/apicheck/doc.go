// Package apicheck is the engine of `idem check URL`: a conformance tester
// for anyone's Idempotency-Key API, written in any language, with or without
// idem in front of it.
//
// It sends real requests to the one origin it is given, to the method and
// paths it is given, within a request budget and a rate limit, never
// follows a redirect, and reports each check as PASS, FAIL, WARN or SKIP
// with its evidence (the requests sent and the answers received) and the
// reference it applies: the IETF draft-ietf-httpapi-idempotency-key-header,
// Stripe's documented behaviour, or idem's own rules (docs/http.md).
//
// # Verdicts
//
// A verdict says what was observed. PASS needs evidence that the retry
// was a replay and not a second execution: a counting oracle, a replay
// marker, or answers that differ from one execution to the next (the
// checker sends the first body once more under a fresh key to find out).
// Without any of them the check is a WARN "cannot tell" that names the
// oracle that would decide. A request that times out is a FAIL of the
// check that depends on it, with where the time went (connection, request
// written, first byte). A SKIP names the flag that would enable the check.
// The whole account is docs/check.md.
//
// # Checks
//
//   - replay-body, replay-headers, replay-marker, replay-cookie,
//     replay-effect: a retry with the key gets the first answer byte for byte,
//     with the headers that matter, marked as a replay, without the first
//     answer's Set-Cookie, and causes no second effect;
//   - mismatch-body, -query, -path, -method: the same key with another
//     request is refused with 422 (WARN for 400 or 409, FAIL when it runs or
//     replays); the query, path and method are the ones named in
//     Config.MismatchQuery, MismatchPath and MismatchMethod, and the checks
//     are skipped without them;
//   - key-required, key-empty, key-too-long, key-control, key-two-lines,
//     key-forms: key syntax;
//   - concurrency: N simultaneous first requests have one effect;
//   - in-flight: a duplicate during a slow first request gets 409 with
//     Retry-After, or waits for the first answer;
//   - scope-replay, scope-reveal: a second caller's request under the same
//     key never gets the first caller's answer, and a refusal never reveals
//     that the key was used by someone else;
//   - failure-policy: a 5xx is not stored (or is, when the API declares
//     Stripe's behaviour);
//   - expiry: the retention is documented, and waited out when short
//     (skipped when longer than Config.MaxWait).
//
// # Replay
//
// Replay sends recorded traffic (Record, one NDJSON line each, written by
// `idem proxy --record`) again as a duplicate storm: every record several
// times, shuffled, concurrent and late, with the same client and the same
// oracles, and counts each operation's effects and answers.
//
// # Counting effects
//
// The oracle (Config.Oracle) tells one execution from another: the resource
// id at a JSON pointer in each 2xx answer, a count endpoint on the same
// origin, or a local command that prints a count. Without one, the checker
// compares 2xx bodies, which is enough when each execution answers
// differently (a new id) and says so in the evidence when it is not.
//
// # Bounds
//
// Config.MaxRequests and Config.Rate bound what is sent; the concurrency
// burst is charged to both at once so that its requests really arrive
// together. Header values are credentials: errors name headers, never their
// values, and the base URL may not carry a password.
package apicheck
