// Package inboxredis is the Redis fast path of package inbox: it answers
// duplicates of already-committed messages with one Redis round trip, so a
// redelivery storm does not become a storm of database transactions.
//
//	fast, _ := inboxredis.New(rdb, &inboxredis.Config{Prefix: "myapp:inbox:", DoneTTL: 7 * 24 * time.Hour})
//	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, FastPath: fast})
//
// # Sections
//
//   - Claim: one Lua script, SET key "processing:<token>" NX PX ClaimTTL; if
//     the key exists it reports "done" (→ inbox answers Duplicate without the
//     database) or "busy" (→ inbox goes to the database, whose row lock makes
//     the delivery wait for the other one).
//   - Complete, after the database commit (or a database Duplicate): a
//     compare-and-set script writes "done" with DoneTTL if the key is empty,
//     done, or still holds the caller's token; another delivery's live claim
//     is never overwritten.
//   - Release, after a failure: compare-and-delete of the caller's claim.
//
// # Guarantees
//
// Redis is an optimisation, never the judge. Every Redis error, timeout
// (Config.Timeout, 200ms by default), flush, restart or eviction makes the
// inbox use the database alone; nothing is rejected and nothing is applied
// twice (tested by flushing, killing and restarting a private redis-server
// in the middle of a run). "done" is written only after the database commit,
// so it can only ever claim a message that really was processed; an evicted
// or expired "done" only costs one database transaction. For the same reason
// no maxmemory-policy check is needed here, unlike idem's redisstore.
//
// Keys are a SHA-256 of the inbox table, consumer and message ID under
// Config.Prefix: no broker-chosen string becomes a Redis key. Each key is
// touched by single-key scripts only, so Redis Cluster works.
//
// Not guaranteed: Redis knowing about messages processed by other processes
// whose post-commit Complete failed, or processed before the fast path was
// enabled; those duplicates take the database path.
package inboxredis
