// Package connectidem gives unary Connect procedures
// (connectrpc.com/connect) Idempotency-Key semantics, with the same rules as
// grpcidem and the same core (one claim per key, the answer stored before it
// is sent, retryable codes released):
//
//	in, err := connectidem.New(store, nil)
//	path, handler := foov1connect.NewFooServiceHandler(svc, connect.WithInterceptors(in))
//
// The key is the Idempotency-Key request header (an sf-string or a bare
// token, as for plain HTTP), or a request field through Config.KeyFunc
// (AIP-155's request_id). The scope is the caller: by default
// HeaderScope("Authorization"), a hash of the Authorization header with the
// auth scheme compared case-insensitively and white space normalised as
// httpidem and grpcidem do ("Bearer t" and "bearer  t" are one caller; a
// value without a space has no scheme and keeps its case; an empty or
// white-space-only value is no caller); a keyed call without one is
// refused unless Config.AnonymousShared.
// (Earlier releases hashed the header as sent, with a "c1:" prefix; the
// "c2:" scopes do not match those records, so a retry that spans the
// upgrade runs again.) Outcomes:
//
//	missing (with RequireKey) or invalid key   CodeInvalidArgument
//	same key, call still running               CodeAborted with a RetryInfo detail
//	same key, different procedure or message   CodeFailedPrecondition
//	store unreachable                          CodeUnavailable (the handler does not run)
//	completed before                           the stored message or error, its
//	                                           headers, and Idempotent-Replayed: true
//
// Connect handlers are net/http handlers, so httpidem's middleware works in
// front of them too; this interceptor is the better fit because it sees
// Connect's codes, not HTTP statuses (an Aborted answer is HTTP 409, which
// plain HTTP would store), decodes the message so the fingerprint is that of
// the request rather than of its wire encoding (JSON or binary), and answers
// refusals in Connect's error format. Streams pass through.
//
// Config.Observer takes an observe.Observer (a hook, promidem, otelidem),
// as grpcidem's does: events carry observe.ProtocolConnect, the procedure
// as Method and the answer's Connect code as Status, and the handler runs
// in the work phase's context. promidem counts the calls as
// idem_rpc_requests_total{rpc_system="connect"}; otelidem's work span
// carries rpc.connect_rpc.error_code for an error.
//
// ClientInterceptor gives a call without a key a new one; a caller that
// retries sets the header once and re-sends the same request.
package connectidem
