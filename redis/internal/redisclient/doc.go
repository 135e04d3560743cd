// Package redisclient is the one seam between idem's Redis-backed packages
// and a Redis client library. The packages (redisstore, and through it the
// Redis side of tiered, redis/redisinbox, redis/redislock and
// redis/redistoken) run their Lua scripts and a few plain commands through the small Client
// interface; GoRedis adapts a go-redis UniversalClient and Rueidis a
// rueidis.Client. The name says what it is: the client, as those packages
// see it. It is internal because its shape follows what those packages
// need, not what a general Redis API would offer.
//
// # Sections
//
// Scripts. NewScript once per script; Client.Eval sends EVALSHA and falls
// back to EVAL on NOSCRIPT (a server that restarted or never saw the
// script); EvalMany pipelines many runs of one script. In a cluster, a
// script's keys share a slot (hash tag) and the call goes to that slot's
// master; both clients follow MOVED and ASK themselves.
//
// Replies. A Reply decodes to the same shapes for both clients: int64,
// string, []any, map[string]any, nil elements. A nil reply is ErrNil, an
// error reply from Redis a *ServerError (IsServerError); anything else
// (connection refused, reset, a context deadline, the client's own timeout)
// is the client's transport error, which the packages report as
// unavailable.
//
// Deadlines. rueidis honours ctx natively. go-redis does only with
// ContextTimeoutEnabled: true; the packages that promise to return at the
// caller's deadline (redislock) refuse a go-redis client without it.
//
// Which client. rueidis pipelines the commands of concurrent callers onto
// shared connections automatically; under concurrency it spends about half
// the client CPU per operation of go-redis and reaches higher throughput
// (BENCHMARKS.md, "rueidis"). go-redis is the choice when the application
// already has a go-redis client configured (pools, TLS, sentinel, hooks)
// and one more client is not worth it.
//
// Plain commands. Do(ctx, name, keys, args…) sends any command routed by its
// first key; ForEachMaster visits every master (SCAN, INFO, CONFIG GET).
package redisclient
