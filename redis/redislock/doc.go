// Package redislock is a Redis lock with owner tokens, a renewing watchdog
// and fencing tokens, on any go-redis v9 UniversalClient (New) or a rueidis
// client (NewRueidis): single node, sentinel, cluster.
//
// # How it works
//
// Acquire runs one Lua script (one round trip). It sets the key prefix{name}
// with SET NX PX ttl to the value "token:", where token is random
// (crypto/rand, 128 bits), and only if that succeeded draws the fence (see
// Fences) into the companion key prefix{name}:fence; the fence lives only in
// that counter. If the key already holds this call's value (an earlier attempt
// whose reply was lost) it refreshes the TTL and returns the counter, which
// is the fence that attempt drew: while the lock holds a value, no other
// acquisition can increment its counter, and RaiseFence on a held lock
// reserves min+1 for the holder rather than handing out min (if the counter
// itself is gone, the attempt draws a new, higher one; the lost fence was
// never seen). A busy lock is retried with jittered exponential backoff
// (Config.RetryMin..RetryMax, never longer than the holder's remaining TTL)
// until the context or Config.WaitTimeout ends. If the call gives up after an
// attempt whose reply never came, it deletes the lock if its value is there.
//
// Release and the watchdog's renewal are Lua compare-and-delete and
// compare-and-pexpire on the value (plain string equality): they never touch
// another owner's lock, and they tell apart lock.ErrNotHeld (another owner
// holds it) and lock.ErrExpired (the key is gone).
//
// # Clients
//
// New refuses a go-redis client created without ContextTimeoutEnabled
// (a *idem.ConfigError for Field "client"). Without it go-redis ignores context deadlines and
// waits for its own ReadTimeout and retries instead, seconds per call: an
// Acquire, Release or renewal against an unreachable Redis would outlast the
// caller's context. Create the client with
//
//	redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
//
// (likewise ClusterOptions, RingOptions, FailoverOptions, UniversalOptions).
//
// NewRueidis takes a rueidis.Client instead; rueidis honours context
// deadlines natively, so there is nothing to refuse. Both run the same
// scripts with the same keys and give the same guarantees; the whole test
// suite, fault tests included, runs on each.
//
// Which to pick: rueidis for throughput. It pipelines the commands of
// concurrent callers onto one connection automatically and spends about half
// the client CPU per Acquire of go-redis under concurrency (BENCHMARKS.md,
// "rueidis"). go-redis when the application already has a configured
// go-redis client (pool, TLS, sentinel, hooks) and a second client is not
// worth it. One difference under faults: rueidis never resends a script by
// itself, so the first TryAcquire after a Redis restart may report the
// broken connection (Acquire retries it; go-redis resends on a fresh
// connection, MaxRetries). A stalled connection is abandoned by go-redis at
// ReadTimeout and by rueidis at ConnWriteTimeout (default 10s); the
// lease's local deadline does not depend on either.
//
// # The watchdog and the local deadline
//
// Each lease is renewed every TTL/3 by its Locker's watchdog: one timer per
// Locker, set for the earliest entry due, and a short-lived goroutine per
// renewal. Acquire only queues the lease and Release only removes it, so a
// lock held for less than TTL/3 never starts a goroutine or arms a timer of
// its own.
//
// Every lease has a local deadline: TTL − Config.SafetyMargin (default
// TTL/10) after the acquisition, or the last renewal that succeeded, was
// sent, on this process's monotonic clock. The key was set or extended no
// earlier than that request left, so until the deadline the lock surely
// lives in Redis. Only a successful renewal moves the deadline, and only
// forward. While a renewal is in flight the watchdog's queue holds the
// deadline instead of the next renewal, and the timer cancels the lease's
// context at the deadline itself: nothing on that path waits for Redis, so a
// black-holed connection cannot keep a holder running past the moment its
// lock may expire (tested with a TCP proxy that black-holes the holder's
// connection, also with a client that ignores deadlines: the holder's
// context has ended before any other process can acquire the lock). The
// cause wraps lock.ErrExpired and the last renewal error. A renewal that
// reports another owner (lock.ErrNotHeld) or no key (lock.ErrExpired)
// cancels at once; a failed one is retried every TTL/20 until the deadline.
// The watchdog never re-acquires. It stops on Release, on loss, and when the
// Acquire context is done (then the lock expires within one TTL unless
// released).
//
// Lease.Valid checks the deadline synchronously, without a network call: a
// holder that may have been paused (GC, SIGSTOP, a VM migration) calls it
// right before it acts, and learns that its lease has passed even if the
// watchdog's timer has not run yet since the pause (tested by SIGSTOPping a
// holder process past its TTL). A pause between Valid and the write remains
// possible; fences cover it.
//
// # Fences
//
// Each acquisition draws its fence in the acquire script, atomically with
// the SET NX: f = max(counter + 1, the Redis server's TIME in microseconds),
// written back to the counter prefix{name}:fence. Fences of a name are
// unique and only grow, across restarts, snapshot restores, counter expiry
// and eviction, as long as the Redis server's clock does not step back
// across a data loss (below). They grow by about a million per second, far
// below 2^53 (about the year 2255 by TIME). The counter lives
// Config.FenceTTL (default 7 days) after the last acquisition; losing it
// costs nothing, TIME takes over.
//
// If a fence ever does go backwards, the storage-side check still protects
// the data: lock.FencedTable compares with the fence stored in the row (the
// database's own maximum), so the new holder's writes are refused with
// *lock.StaleFenceError, never applied out of order. Nothing is corrupted;
// work stalls. Repair: RaiseFence(name, err.Current), release, acquire again.
// (RaiseFence on a held lock sets the counter to err.Current+1, reserved for
// the holder; the next acquisition's fence is above both.)
//
// # Guarantees under faults
//
// What holds:
//   - Holder crash (SIGKILL): its lock stays until the TTL it last renewed
//     runs out, then the next Acquire gets it with a larger fence (tested by
//     killing a child process).
//   - Redis unreachable (black hole, partition): the holder's context is
//     cancelled at its local deadline, before the key can expire and another
//     holder acquire, whether or not Redis answers; Acquire retries until its
//     wait ends, then reports the last error.
//   - Redis restart without persistence: the lock and the counter are gone.
//     Holders learn lock.ErrExpired at their next renewal (≤ TTL/3) or
//     deadline; new holders acquire at once, and their fences, drawn from
//     TIME, are above every earlier one (tested).
//   - Restart from an older RDB snapshot (Debian's default configuration
//     saves snapshots; a crash loses everything after the last one): the
//     counter comes back behind fences already handed out, some to holders
//     still alive. The next fence is still above all of them, because TIME
//     did not go back with the data (tested: SAVE, more acquisitions, SIGKILL,
//     restart from the old dump; the live old holder's fenced writes are
//     refused, the new holder's accepted). A lock key restored from the
//     snapshot (held at SAVE time) blocks the name until its TTL, which
//     Redis stores as an absolute time, has passed; its former holder's
//     renewal then finds another owner or no key.
//   - Failover to a replica that had not received the last writes (Redis
//     replication is asynchronous; Sentinel or Cluster promote it): the same
//     mechanism protects fences, with the new primary's clock: a fence drawn
//     there is above every fence drawn on the old primary as long as the new
//     primary's clock is not behind the old one's by more than the time the
//     failover took (seconds, with NTP the clocks agree to milliseconds).
//     Tested with a private primary and replica whose replication link a TCP
//     proxy black-holes before more acquisitions; the primary is killed and
//     the replica promoted. (The two servers share one host clock there.)
//   - Clock jumps on the holder's host: deadlines use Go's monotonic clock; a
//     wall-clock step changes nothing.
//   - Redis server clock stepped back with its data intact: counter + 1
//     keeps fences growing (see TestFenceSurvivesCounterLossAndRaise, which
//     puts the counter ahead of TIME, the state a backward step leaves).
//   - Redis server clock stepped forward: keys expire early by Redis's
//     clock. Holders learn it at their next renewal (≤ TTL/3) with
//     lock.ErrExpired; meanwhile a new holder may acquire, with a larger
//     fence, so fenced writes stay ordered. (libfaketime 0.9.10 cannot run
//     redis-server, which links jemalloc, so this is not tested with a
//     stepped server clock; the lost-key path it leads to is.)
//
// What does not hold:
//   - Mutual exclusion across a failover to a replica that had not received
//     the lock, or across a restart that lost it: two holders can believe
//     they hold the lock at once. This package does not implement Redlock.
//     Fences, and the conditional writes of the layers below, protect the
//     data then; the lock only saves wasted work.
//   - A holder paused past its TTL keeps running after it resumes until it
//     looks at its context or Valid; only fenced or conditional writes keep
//     the data right in between.
//   - Fence order after a data loss (restart from a snapshot, a restart
//     without persistence, a failover) combined with the server's clock, or
//     the new primary's, being behind by more than the time since the last
//     acquisition: fences may repeat. FencedTable then refuses the new
//     holder (it never accepts an older write over a newer one), and
//     RaiseFence repairs the counter.
package redislock
