// Package tiered puts a fast store (Redis) in front of a durable one (SQL):
// "defence in depth" (docs/guarantees.md) as one idem.Store.
//
// A flash sale sends a million retries of ten thousand orders. Each order's
// first request is judged by PostgreSQL, the store that survives a
// restart; every retry after that is answered by Redis, in one round trip,
// without a query to PostgreSQL. When Redis is down, flushed or restarted,
// requests go to PostgreSQL alone: slower, never wrong, never refused.
//
//	fast, _ := redisstore.NewRueidis(rc, nil) // or redisstore.New(rdb, nil) on go-redis
//	durable, _ := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
//	store, _ := tiered.New(fast, durable, nil)
//	receipt, err := idem.Do(ctx, store, key, nil, charge)
//
// The fast store is a redisstore on either Redis client. rueidis is the
// choice for throughput: the duplicates tiered answers from Redis alone,
// replays and in-flight answers, run about 1.7× as fast at 64 callers as on
// go-redis (BENCHMARKS.md, "tiered on rueidis"). go-redis is the choice
// when the application already has a configured go-redis client. The
// package's tests run on both.
//
// # How it decides
//
// Begin asks the fast store first:
//
//   - Replay: the answer. The fast store holds a completed record only after
//     the durable store completed it (Complete writes durable first; a
//     durable Replay is copied into the fast store), and that copy expires
//     no later than the durable record.
//   - InFlight: the answer (HTTP 409 with Retry-After). An in-progress fast
//     record never answers Replay: the cautionary tale of caching
//     "in progress" as if it were final is not repeated here.
//   - Acquired, Mismatch, an error, or a fast store skipped after a recent
//     failure: the durable store decides, and is the judge of every claim.
//     Then the fast store is made to show the decision:
//   - durable Acquired: the fast claim made on the way is remembered, in
//     this process, to be completed, released or extended together with
//     the durable one. When the fast store did not show this claim (it
//     answered Mismatch: a stale record of another request; or its answer
//     was lost), the fast record is overwritten with this claim (Mirror.Adopt).
//     When the fast store was skipped, its record is cleared when the
//     claim is finished.
//   - durable Replay: the result is copied into the fast claim, with the
//     fast expiry lowered to the durable record's ExpiresAt (one durable
//     Get, on fast misses only). A fast Mismatch for a completed durable
//     record means the fast record is stale: it is deleted.
//   - durable InFlight or Mismatch: the fast claim is released.
//
// A fast Mismatch is confirmed by the durable store because the fast record
// may be a claim whose release did not reach Redis: a stale fast record
// never turns a legitimate request into a 422.
//
// Complete, Release and Extend go to the durable store first and to the
// fast store after it, best-effort; a fast record that no longer shows the
// owner's claim when the durable Complete succeeded is deleted. Hold
// releases the fast claim first and then holds the key in the durable
// store: a held key is never copied into Redis, and the durable store
// keeps the first of an owner's Hold and Complete, so a Complete that
// lost to a Hold there (and succeeded without effect) finds its fast claim
// gone and copies nothing. MarkStarted
// goes to the durable store only: the fast store never grants a claim, so
// only the durable record needs the mark, and a takeover learns of it from
// the durable Begin (Claim.Started); the cost is the durable store's one
// round trip. Get is the durable store's. Purge purges both and counts the
// durable store's deletions.
//
// These corrections need a fast store that implements Mirror (redisstore
// does). With any other fast store, durable results are never copied into
// it (no way to bound the copy's expiry) and stale fast records are not
// corrected.
//
// # Replication
//
// Store implements idem.ReplicationReporter with its durable store's
// report: whether an acknowledged record survives a failover is the
// durable store's to say, because Redis answers only with results the
// durable store completed first and never grants a claim. A Redis
// failover loses copies, never decisions. So the fast redisstore needs no
// Config.WaitReplicas on a replicated Redis; set AllowAsyncReplication on
// it so that its Check accepts the replicas (tiered's calls into it never
// refuse). The durable store must be synchronously replicated
// (docs/replication.md).
//
// # Timeouts, backoff and tokens
//
// Fast calls are bounded by Config.FastTimeout (50ms). After a failed fast
// Begin, Begin skips the fast store for Config.FastBackoff (1s), so an
// outage costs one or two timeouts per interval (the failed Begin, and the
// Adopt that tries to correct the fast record afterwards). Fast failures are
// logged at most once per Config.LogInterval and counted in Stats.
// redisstore refuses a go-redis client without Options.ContextTimeoutEnabled,
// without which go-redis would ignore FastTimeout and wait for its
// ReadTimeout (3s by default); rueidis honours FastTimeout natively.
//
// When a fast store implements TokenBeginner (redisstore does), the tiered
// store picks the fast owner token itself: a fast Begin whose answer was
// lost (a timeout after the script ran) still leaves a claim the tiered
// store can complete, release or overwrite, instead of one that blocks
// retries until its lease ends. When go-redis itself resends a Begin whose
// reply was lost, or redisstore resends it on rueidis, redisstore
// recognises the token and answers Acquired: the caller is never told
// InFlight about its own claim.
//
// # Guarantees
//
//   - Never executes twice because of the fast store: every Acquired comes
//     from the durable store. The fast store can only make a request wait
//     or replay a result the durable store holds or held.
//   - Never rejects because of the fast store: any fast error, timeout,
//     black hole, lost reply, reset, flush or restart falls through to the
//     durable store (tested with a TCP fault proxy in front of a real
//     Redis, and by killing and restarting it). Only durable failures reach
//     the caller (idem.IsUnavailable, fail closed).
//   - Never replays a result the durable store did not keep: of an
//     owner's Hold and Complete crossing (a retry after a lost answer),
//     Redis copies Complete's result only when the durable store kept it
//     (Complete came first), and never replays a held key (one exception,
//     a passed-on owner with Redis failing between the calls, is below).
//   - Never answers from a stale copy: a copied result expires with the
//     durable record, so after the durable record expired and was purged a
//     retry cannot replay an older result than the one a new execution
//     stored; a durable grant overwrites a fast record that contradicts it.
//   - A crash of the holder: both leases run out; the next retry takes the
//     fast claim over, and the durable store grants the takeover (with its
//     Started mark).
//   - Redis restart, restart from an older RDB snapshot, failover to a
//     lagging replica, FLUSHALL: the fast store loses or rolls back
//     records. A lost record costs a durable query; a record brought back
//     from a snapshot is an older copy of what the durable store decided:
//     a completed one replays the result the durable store holds (results
//     never change), an in-progress one answers InFlight until its lease
//     ends. No second execution, no wrong result.
//   - Clock steps of the Redis server: leases and copies there expire
//     early or late by the step. Early costs durable queries; late keeps
//     an in-progress copy answering InFlight up to the step longer, and a
//     completed copy replaying past the durable record's expiry (see
//     below). Clock steps of the durable server are that store's (see its
//     package documentation). Application hosts' clocks are not read for
//     any decision.
//
// What it costs when things go wrong, and does not promise:
//
//   - A fast Complete or Release that fails after the durable one
//     succeeded (Redis unreachable at that moment, or a fast store without
//     TokenBeginner whose Begin timed out) leaves an in-progress fast
//     record. The key is queued in this process (at most 10,000 keys) and
//     its fast record deleted by the process's next Begin once Redis
//     answers again (repair). Until then, and for every process if this
//     one dies first, duplicates of that key are told InFlight until the
//     copy's lease runs out (Retry-After says when), then go to the
//     durable store, which replays. A release failing this way delays the
//     retry by at most a lease. Never a wrong result, never a second
//     execution.
//   - An owner this Store did not grant (another process's, passed on)
//     can be completed, held or released through it: the durable store
//     decides, and the fast record is deleted rather than trusted. A Hold
//     through it deletes the fast record before the durable Hold; if Redis
//     fails that delete and then, recovered, takes the copy of the owner's
//     Complete crossing the Hold in the granting process, duplicates may
//     replay that Complete's result for the held key until the copy
//     expires, unless the Hold's second delete (after the durable Hold,
//     or queued until Redis answers) comes after the copy. It needs a
//     passed-on owner, both finishing calls crossing, and Redis failing
//     between them.
//   - A result larger than the fast store's MaxResult is not cached;
//     replays of it come from the durable store.
//   - Which fast claim goes with which durable owner is remembered in this
//     process's memory (an owner is never shared between processes). If
//     the process dies, its fast claim runs out with its lease, like the
//     durable one.
//   - The fast copy's expiry is compared with the Redis clock, the
//     durable record's with the durable store's clock. When the Redis
//     clock is behind the durable one (or is stepped back), a copy may
//     replay for up to that skew after the durable record expired:
//     retention is a minimum, not a maximum. The result replayed is the
//     one the durable store held.
//   - A fast record that contradicts the durable store, kept by Redis
//     through an outage (the durable store lost or expired a record first,
//     and Redis was skipped while the key was claimed and completed
//     again), is deleted by the repair of the process that completed the
//     key, once Redis answers it; if that process dies first, it stays
//     until its own expiry and its duplicates may be answered from it. It
//     needs a durable store that loses records, and a Redis outage
//     spanning the whole execution.
//
// # Tests under faults
//
// idemtest.RunFaults runs with the faults on the link to PostgreSQL
// (Redis healthy in front of it): lost replies, black holes, a holder
// partitioned from its judge, resets in mid-reply. Faults on the link to
// Redis (black hole, lost replies resent by the client or by redisstore,
// refused and reset connections, kill, flush, restart, restart from an
// older snapshot) are tested against the invariants above by the
// package's own tests, on both Redis clients; the shared suite does not
// fit that link, because a holder cut off from Redis is not cut off from
// its judge.
package tiered
