// Package redisinbox is the Redis fast path of package inbox: it answers
// duplicates of already-committed messages with one Redis round trip, so a
// redelivery storm does not become a storm of database transactions.
//
//	fast, _ := redisinbox.New(rdb, &redisinbox.Config{Prefix: "myapp:inbox:", DoneTTL: 7 * 24 * time.Hour})
//	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, FastPath: fast})
//
// # Sections
//
//   - Clients: New takes a go-redis client (redis.UniversalClient: single
//     node, Sentinel, Cluster), NewRueidis a rueidis.Client (single node,
//     Sentinel, Cluster). Both run the same scripts with the same
//     guarantees; rueidis pipelines concurrent deliveries' calls onto shared
//     connections and costs less client CPU under load, go-redis is the
//     choice when the application already has one configured
//     (docs/redis.md).
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
// Redis is an optimisation, never the judge. Every Redis error, timeout,
// flush, restart or eviction makes the inbox use the database alone; nothing
// is rejected and nothing is applied twice (tested by flushing, killing and
// restarting a private redis-server in the middle of a run, and by
// black-holing the connection through a fault proxy, on both clients and on
// a Redis Cluster). "done" is written only after the database commit, so
// it can only ever claim a message that really was processed; an evicted or
// expired "done" only costs one database transaction. For the same reason no maxmemory-policy check is needed here,
// unlike idem's redisstore.
//
// Timeouts: every call ends within Config.Timeout (200ms by default).
// rueidis enforces it itself, and so does go-redis on a client created with
// Options.ContextTimeoutEnabled; without it go-redis would wait for its
// ReadTimeout (3s, or for ever with -1), so the FastPath runs the call in a
// goroutine and stops waiting at the timeout (once 64 such calls are hung,
// further calls fail at once until some end). Prefer ContextTimeoutEnabled:
// it also frees the connection at the timeout.
//
// Outages: the inbox's breaker (inbox.Config.FastPathBackoff, 1s) skips
// Redis after a failure and lets one call probe it per backoff, so a hung
// Redis costs one timeout per second, not one per message; a successful
// probe brings the fast path back by itself.
//
// Keys are a SHA-256 of the database's identity (database, schema and table
// as the database names them, or inbox.Config.Namespace), the consumer and
// the message ID, under Config.Prefix: no broker-chosen string becomes a
// Redis key, and two databases with the same table name never share an
// entry. Each key is touched by single-key scripts only, so Redis Cluster
// works.
//
// Not guaranteed: Redis knowing about messages processed by other processes
// whose post-commit Complete failed or was skipped during an outage, or
// processed before the fast path was enabled; those duplicates take the
// database path. Two database servers whose databases have the same names
// look alike unless each inbox sets its own inbox.Config.Namespace.
package redisinbox
