// Package tiered puts a fast store (Redis) in front of a durable one (SQL):
// the seed's "defence in depth" as one idem.Store.
//
// A flash sale sends a million retries of ten thousand orders. Each order's
// first request is judged by PostgreSQL, the store that survives a
// restart; every retry after that is answered by Redis, in one round trip,
// without a query to PostgreSQL. When Redis is down, flushed or restarted,
// requests go to PostgreSQL alone: slower, never wrong, never refused.
//
//	fast, _ := redisstore.New(rdb, nil)
//	durable, _ := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
//	store, _ := tiered.New(fast, durable, nil)
//	receipt, err := idem.Do(ctx, store, key, nil, charge)
//
// # How it decides
//
// Begin asks the fast store first:
//
//   - Replay: the answer. The fast store holds a completed record only after
//     the durable store completed it (Complete writes durable first; a
//     durable Replay warms the fast store).
//   - InFlight: the answer (HTTP 409 with Retry-After). An in-progress fast
//     record never answers Replay: the cautionary tale of caching
//     "in progress" as if it were final is not repeated here.
//   - Acquired, Mismatch, an error, or a fast store skipped after a recent
//     failure: the durable store decides, and is the judge of every claim.
//     Durable Acquired is returned (its owner and fence); the fast claim
//     made on the way is remembered, in this process, to be completed,
//     released or extended together with the durable one. Durable Replay
//     completes the fast claim with the durable result; durable InFlight or
//     Mismatch releases it. A fast Mismatch is confirmed by the durable
//     store because the fast record may be a claim whose release did not
//     reach Redis: a stale fast record never turns a legitimate request
//     into a 422.
//
// Complete, Release and Extend go to the durable store first and to the
// fast store after it, best-effort. Get is the durable store's. Purge
// purges both and counts the durable store's deletions.
//
// # Timeouts, backoff and tokens
//
// Fast calls are bounded by Config.FastTimeout (50ms). After a failed fast
// Begin, Begin skips the fast store for Config.FastBackoff (1s), so an
// outage costs one timeout per interval. Fast failures are logged at most
// once per Config.LogInterval and counted in Stats. With go-redis, create
// the fast client with Options.ContextTimeoutEnabled, or it ignores the
// deadline and waits for its ReadTimeout (3s by default).
//
// When a fast store implements TokenBeginner (redisstore does), the tiered
// store picks the fast owner token itself: a fast Begin whose answer was
// lost (a timeout after the script ran) still leaves a claim the tiered
// store can complete or release, instead of one that blocks retries until
// its lease ends.
//
// # Guarantees
//
//   - Never executes twice because of the fast store: every Acquired comes
//     from the durable store. The fast store can only make a request wait
//     or replay a result the durable store already holds.
//   - Never rejects because of the fast store: any fast error, timeout,
//     flush or restart falls through to the durable store. Only durable
//     failures reach the caller (idem.IsUnavailable, fail closed).
//   - A crash of the holder: both leases run out; the next retry takes the
//     fast claim over, and the durable store grants the takeover.
//   - Clock jumps: each store uses its own server clock, as alone.
//
// What it costs when things go wrong, and does not promise:
//
//   - A fast Complete or Release that fails after the durable one
//     succeeded (Redis unreachable at that moment, or a fast store without
//     TokenBeginner whose Begin timed out) leaves an in-progress fast
//     record: duplicates of that key are told InFlight until its lease
//     runs out (Retry-After says when), then go to the durable store,
//     which replays. A release failing this way delays the retry by at
//     most a lease. Never a wrong result, never a second execution.
//   - A result larger than the fast store's MaxResult is not cached;
//     replays of it come from the durable store.
//   - Which fast claim goes with which durable owner is remembered in this
//     process's memory (an owner is never shared between processes). If
//     the process dies, its fast claim runs out with its lease, like the
//     durable one.
//   - Fast records expire by the fast store's clock, durable ones by the
//     durable store's. Within the skew between the two clocks around a
//     record's expiry, a duplicate may still be replayed from Redis after
//     the durable record expired: retention is a minimum, not a maximum.
package tiered
