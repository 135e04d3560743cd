// Package redislock is a Redis lock with owner tokens, a renewing watchdog
// and fencing tokens, on any go-redis v9 UniversalClient (single node,
// sentinel, cluster).
//
// # How it works
//
// Acquire runs one Lua script (one round trip). It sets the key prefix{name}
// with SET NX PX ttl to the value "token:", where token is random
// (crypto/rand, 128 bits), and only if that succeeded draws the fence with
// INCR on the companion key prefix{name}:fence; the fence lives only in that
// counter. If the key already holds this call's value (an earlier attempt
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
// # The watchdog
//
// Each lease is renewed every TTL/3 by its Locker's watchdog: one timer per
// Locker, set for the earliest renewal due, and a short-lived goroutine per
// renewal. Acquire only queues the lease and Release only removes it, so a
// lock held for less than TTL/3 never starts a goroutine or arms a timer of
// its own. The watchdog cancels the lease's context
// (context.WithCancelCause) the moment a renewal reports lock.ErrNotHeld or
// lock.ErrExpired, and, when Redis does not answer (it retries every TTL/20),
// as soon as the TTL bought by the last successful renewal (measured from when
// that request was sent, minus 1% + 2ms for clock rates) has passed: the cause
// then wraps lock.ErrExpired and the last error. It never re-acquires. It
// stops on Release, on loss, and when the Acquire context is done (then the
// lock expires within one TTL unless released).
//
// # Fences and Redis data loss
//
// Fences of a name grow by one per acquisition. A Redis that restarts
// without persistence (or fails over to a replica that had not seen the
// counter, or evicts it) loses the counter, and a plain INCR would restart at
// 1: new holders would carry fences below the ones already stored next to
// the data. This package starts a missing counter at the Redis server's
// clock in microseconds (TIME) instead, which is above every fence handed
// out before unless the server's clock went backwards across the loss (a
// counter advances far slower than one per microsecond). For the same
// reason counters can expire without harm: each lives Config.FenceTTL
// (default 7 days) and restarts higher.
//
// If a counter does go backwards, the storage-side check still protects the
// data: lock.FencedTable compares with the fence stored in the row (the
// database's own maximum), so the new holder's writes are refused with
// *lock.StaleFenceError, never applied out of order. Nothing is corrupted;
// work stalls. Repair: RaiseFence(name, err.Current), release, acquire again.
// (RaiseFence on a held lock sets the counter to err.Current+1, reserved for
// the holder; the next acquisition's fence is above both.)
//
// # Guarantees
//
//   - Crash of a holder: its lock stays until the TTL it last renewed runs
//     out, then the next Acquire gets it with a larger fence (tested by
//     SIGKILLing a child process).
//   - Redis unreachable: holders' contexts are cancelled within one TTL;
//     Acquire retries until its wait ends, then reports the last error.
//   - Redis restarted without persistence: holders learn lock.ErrExpired at
//     their next renewal; Release reports it; new holders acquire at once.
//   - Clock jumps: holders use Go's monotonic clock. A forward jump of the
//     Redis server's wall clock expires keys early; holders learn it at their
//     next renewal (≤ TTL/3).
//   - Not promised: mutual exclusion across a failover to a replica that
//     had not received the lock (Redis replication is asynchronous), nor
//     against a holder that is paused (GC, SIGSTOP) past its TTL. Fences are
//     the protection in both cases.
package redislock
