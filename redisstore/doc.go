// Package redisstore keeps idempotency records in Redis.
//
// A retried payment reaches two API nodes at once. Both ask Redis about the
// same key; one Lua script runs at a time on the key's node, so exactly one
// of them reads "nothing here" and writes its claim, and the other reads that
// claim and answers "in flight". When the first finishes, its result goes
// into the same record, and every later retry gets it back from one
// round trip — without running the payment again.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(rdb, nil)
//	...
//	if err := store.Check(ctx); err != nil { // refuses an evicting server
//		log.Fatal(err)
//	}
//	receipt, err := idem.Do(ctx, store, key, nil, charge)
//
// # Records
//
// Each record is one hash at Prefix + hex(key digest): no client-chosen
// string and no scope becomes part of a Redis key. The fields are a version
// ("v" = "1"; a record of an unknown version is refused, never misread),
// the state, the fingerprint, the owner token, the fence, and the acquired,
// lease-until and expires-at times in microseconds of the server's clock.
// The key's TTL is the record's expiry (PEXPIREAT, rounded up to a
// millisecond): Redis deletes expired records by itself, and Complete and
// Release keep the TTL. Extend pushes it out when a lease outlives the
// retention.
//
// # Atomicity
//
// Begin, Complete, Release and Extend are each one Lua script on one key
// (EVALSHA, falling back to EVAL when the server lost its script cache), so
// they are single round trips that work unchanged on a cluster. The script
// reads the record, decides and writes in one step; the owner token is
// compared in the same step as every write. Times come from TIME inside the
// script; Redis 5 and newer replicate a script's effects, not the script,
// so replicas never re-read the clock. Tokens are generated in Go from
// crypto/rand and passed to the script.
//
// Get is one HMGET. Purge SCANs the keys under Prefix and deletes, with a
// script that compares in the same step, only records whose logical expiry
// passed; with TTLs in place it normally finds nothing (see Store.Purge).
//
// # Guarantees
//
// What holds:
//
//   - At most one owner per key at a time, as long as Redis keeps the
//     record: 200 goroutines racing for a key get one Acquired.
//   - A stale or forged owner (after a takeover, a release, a completion,
//     or a restart that lost the record) gets idem.ErrLeaseLost and
//     changes nothing.
//   - A crash of the holder: its lease runs out by Redis's clock and a retry
//     takes the claim over with a larger fence (tested by SIGKILLing a
//     process that holds a claim).
//   - Redis down or unreachable: every operation fails with an error for
//     which idem.IsUnavailable is true; nothing is decided in Go.
//   - Clock jumps of the application hosts change nothing: only the Redis
//     server's clock is read. Fences grow with that clock, so they keep
//     growing after a record expired and was deleted.
//
// What does not hold, and what to do about it:
//
//   - Redis is memory first. A restart without persistence, a FLUSHALL, a
//     failover to a replica that had not received the last writes, or an
//     eviction loses records: the owner of a lost claim gets ErrLeaseLost
//     at Complete, but a retry that arrives meanwhile executes again. Run
//     Redis with appendonly (appendfsync everysec or always) and
//     maxmemory-policy noeviction (Check enforces the latter), or put a
//     durable store behind it (package tiered), or keep a unique constraint
//     in your own database as the correctness backstop.
//   - A Redis clock jump moves every lease and expiry: a jump forward can
//     expire live leases early (a takeover while the holder still works,
//     fenced out by the fence), a jump backward keeps records longer.
//   - go-redis bounds a call by the context's deadline only when the
//     client is created with Options.ContextTimeoutEnabled; otherwise by
//     its ReadTimeout and WriteTimeout (3s by default). Enable it when
//     callers rely on short deadlines (tiered's FastTimeout does).
//   - go-redis retries some failed commands by itself (MaxRetries). If a
//     Begin's answer is lost and go-redis resends it, the second run finds
//     the first one's claim and answers InFlight: the caller sees a 409 for
//     its own claim until the lease ends, never a second execution. Set
//     MaxRetries to -1 to see the failure instead.
//
// # Check
//
// Check reads maxmemory-policy on every master (CONFIG GET, or INFO memory
// when a managed server forbids CONFIG) and refuses anything but
// noeviction: the volatile-* policies evict exactly keys with a TTL, which
// is every record here. A server that reveals its policy to neither command
// is refused too; Config.AllowEviction turns both refusals into a logged
// warning.
package redisstore
