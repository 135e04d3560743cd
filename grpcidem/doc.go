// Package grpcidem gives unary gRPC methods Idempotency-Key semantics: a
// server interceptor that runs each keyed call once and answers every retry
// with the first answer, and a client interceptor that gives each logical
// call one key, reused by gRPC's own retries.
//
// # Server
//
//	in, err := grpcidem.New(store, nil) // any idem.Store
//	srv := grpc.NewServer(grpc.UnaryInterceptor(in.Unary()))
//
// The key comes from the metadata entry "idempotency-key" (an RFC 8941
// sf-string, "order-1", or a bare token, order-1: one key), or from the
// request message through Config.KeyFunc (AIP-155's request_id). The
// fingerprint is the full method name and the deterministic proto encoding
// of the request. Outcomes map to codes:
//
//	missing (with RequireKey) or invalid key   InvalidArgument
//	keyed call without a caller identity       InvalidArgument (unless AnonymousShared)
//	same key, call still running               Aborted with RetryInfo and the
//	                                           trailer grpc-retry-pushback-ms
//	same key, different method or request      FailedPrecondition
//	store unreachable                          Unavailable (the handler does not run)
//	completed before                           the stored response or error, with
//	                                           header metadata idempotent-replayed: true
//
// The scope is the caller (Config.ScopeFunc, by default
// MetadataScope("authorization"): a hash of the "authorization" metadata,
// the auth scheme compared case-insensitively and white space normalised
// as httpidem and connectidem do, so "Bearer t" and "bearer  t" are one
// caller; a value without a space has no scheme and keeps its case; an
// empty or white-space-only value is no caller), so one caller's key never
// replays another's answer. (Before
// this normalisation the scope was hashed as sent, with a "g1:" prefix;
// the "g2:" scopes of this release do not match those records, so a retry
// that spans the upgrade runs again.) Which codes are stored follows HTTP's rule (DefaultStoreCode):
// answers that say a retry may succeed (Unavailable, Aborted,
// ResourceExhausted, DeadlineExceeded, Canceled) or that the server failed
// (Unknown, Internal, DataLoss) release the claim so the retry runs; OK and
// every other error are stored. The handler's header and trailer metadata
// are stored and replayed too. A handler that panics releases the claim.
//
// The answer reaches the caller only after the store recorded it; if the
// store fails at that moment the caller gets Unavailable, so every answer a
// caller sees is the one every retry will see. A replay decodes the stored
// response with the message type registered in protoregistry.GlobalTypes,
// which generated code fills in.
//
// # Client
//
//	conn, err := grpc.NewClient(addr, grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor(nil)), …)
//
// A call whose context carries no key gets a new one. gRPC's retry policy
// resends with the same metadata, so its attempts share the key; list
// ABORTED in its retryableStatusCodes and it waits, as the
// grpc-retry-pushback-ms trailer of an in-flight answer asks, for the
// first call to finish, then gets its answer. A caller that retries by
// hand must create the key once and keep it in the context it retries
// with.
//
// A retry interceptor of your own goes inside this one, after it in the
// chain, so that every attempt carries the key the logical call was given:
//
//	grpc.WithChainUnaryInterceptor(grpcidem.UnaryClientInterceptor(nil), yourRetry)
//
// Chained the other way (yourRetry first), each attempt enters
// UnaryClientInterceptor again with a context that has no key, gets a new
// one, and runs as a new operation.
//
// The interceptor does not retry by itself; the rules that idemclient
// applies to HTTP map onto a service config's retryPolicy like this (the
// full table is in docs/client.md):
//
//	retry, same key      ABORTED (in flight; it carries a RetryInfo detail),
//	                     UNAVAILABLE (store unreachable, or the transport),
//	                     RESOURCE_EXHAUSTED if the service throttles
//	never                INVALID_ARGUMENT (key or caller), FAILED_PRECONDITION
//	                     (key reused with another request), every other code
//
// Pushback: gRPC-Go's retry honours a grpc-retry-pushback-ms trailer and
// otherwise its own backoff; it does not read RetryInfo. The interceptor
// sends that trailer with every in-flight Aborted (the same delay as the
// RetryInfo), so the policy's next attempt waits for it whatever its
// initialBackoff; a retry by hand waits the RetryInfo delay with the same
// context.
//
// Budget: retryThrottling (maxTokens, tokenRatio) is gRPC's token bucket per
// channel, as idemclient.Budget is per Transport: failures spend, successes
// earn, and retries stop at half of maxTokens, so an outage cannot become
// a retry storm. A call that gives up (DeadlineExceeded, Unavailable) after
// an attempt was sent has an unknown outcome: look it up by its key before
// starting it again with a new one.
//
// # Streams
//
// Streaming methods are passed through: this package has no stream
// interceptor, since a stream's messages cannot be replayed as one answer.
// Make streaming methods idempotent with business keys (sqlstore,
// inbox).
//
// # Observability
//
// Config.Observer takes an observe.Observer: a hook
// (observe.ObserverFunc), promidem's Prometheus metrics or otelidem's
// spans and metrics serve gRPC as they serve HTTP. Events carry
// observe.ProtocolGRPC, the full method name as Method and the answer's
// status code (0 is OK) as Status; the decisions are the same as HTTP's
// (executed, released, replayed, in_flight, mismatch, rejected,
// store_error, keyless, not_replayable, canceled, and acquired before the
// final one). The handler runs in the work phase's context, so its spans
// nest under otelidem's idem.work span, which carries
// rpc.grpc.status_code. promidem counts the calls under RPC names
// (idem_rpc_requests_total{rpc_system="grpc"}), so one Metrics serves the
// HTTP middleware and the interceptors on one registry.
//
// # Guarantees
//
// Those of the store underneath (docs/guarantees.md): at most one live
// execution per key, and a crash between the handler's effects and the
// record leaves a claim that a retry takes over after the lease; pass the
// fence (idem.FenceFromContext) to the handler's own writes, or complete in
// the business transaction, to close that window.
package grpcidem
