// Package redistoken keeps onetime tokens in Redis, through a go-redis v9
// UniversalClient (New) or a rueidis client (NewRueidis): single node,
// sentinel or cluster.
//
// Each token is one hash under Config.Prefix + "{" + hex(SHA-256(token)) +
// "}", holding the scope's SHA-256, the expiry by the server's clock and,
// once spent, the spender's Use. Neither the raw token nor the raw scope
// reaches Redis.
//
// # Atomicity
//
// Insert, Consume and Restore are each one Lua script (EVALSHA, one round
// trip, one key, so cluster-safe). Consume decides and classifies in the same
// script: unknown, foreign scope, used, expired — in that order — or spends
// the token by writing the spender's Use into the hash. A plain GETDEL would
// be one command too, but it deletes the evidence: a second submit could no
// longer be told "used" rather than "unknown", and a foreign scope would
// burn the owner's token.
//
// # Clients
//
// Both clients run the same scripts and pass the same conformance suite
// (also on a 3-master Redis Cluster). Pick rueidis for throughput: it
// pipelines concurrent callers' commands automatically at about half the
// client CPU per call of go-redis (BENCHMARKS.md, "rueidis"); pick go-redis
// when the application already uses it. With go-redis, create the client
// with ContextTimeoutEnabled: true so that calls end at the context's
// deadline; rueidis does so natively.
//
// # Guarantees
//
//   - Of any number of concurrent Consume calls, at most one wins: Redis runs
//     scripts one at a time.
//   - Crash of the client: a spent token stays spent; the HTTP middleware's
//     next owner of the same record re-takes it (see onetime.Use).
//   - Redis down: every call fails with an error matching
//     idem.ErrUnavailable; nothing is assumed spent or valid.
//   - Redis restarted without persistence, flushed, or a key evicted under
//     maxmemory: the token is gone and every later Consume answers
//     ErrUnknown. That fails closed (the user reloads the form); it can never
//     let a used token be used again, so, unlike an idempotency store, this
//     package accepts evicting policies.
//   - Clock: expiry uses the server's TIME; a jump of the server's clock
//     moves every token's remaining life by the jump. Client clocks do not
//     matter.
//   - Retention: Redis deletes a token Config.Retain after its expiry;
//     from then on it is ErrUnknown. Purge has nothing to do.
package redistoken
