// Package lock is idem's distributed mutual exclusion: the last layer of the
// seed's defence in depth, for critical sections that span several resources
// (stock and order in two tables, two services) where a unique index or a
// conditional UPDATE alone cannot serialise the work.
//
// Locks manage concurrency, constraints manage correctness. A lock can be lost:
// its TTL runs out while the holder is paused, the Redis server restarts
// without persistence, the PostgreSQL session that held it dies. Code in this
// package therefore never trusts a lock alone. Every acquisition carries a
// fencing token (Fence) that grows with each acquisition of a name; the holder
// hands it to its writes, and the storage refuses an older fence than the
// newest it has seen (FencedTable). When the lock fails, the data stays right;
// only wasted work grows.
//
// This package depends on the standard library only. The backends live in
// their own packages, so importing one never drags in the other's client:
//
//   - lock/redislock: SET NX PX with a random token, Lua compare-and-delete
//     and compare-and-extend, a watchdog that renews every ttl/3 and cancels
//     the holder's context the moment the lease may be gone.
//   - lock/pglock: PostgreSQL advisory locks, session-level on a pinned
//     connection or transaction-level inside the caller's *sql.Tx.
//
// # Using a lock
//
// Do acquires, runs a function under the lease's context with its fence, and
// releases. Inside, repeat the seed's double check: re-read the state and
// return success if the work is already done, because a lock only says "no
// one else is doing this right now", never "this has not been done".
//
//	err := lock.Do(ctx, locker, "pay:"+orderID, func(ctx context.Context, fence lock.Fence) error {
//		order, err := load(ctx, orderID)
//		if err != nil || order.Status == "paid" {
//			return err // already done: idempotent success
//		}
//		return orders.Update(ctx, db, orderID, fence, "status = $1", "paid")
//	})
//
// # Leases and their context
//
// A Lease's Context is cancelled, with a cause, when the lease is lost
// (errors.Is(context.Cause(ctx), ErrNotHeld) or ErrExpired, see IsLost), when
// it is released (ErrReleased) and when the context given to Acquire is done.
// Release never deletes a lock that now belongs to another owner.
//
// # Fencing on the storage side
//
// FencedTable.Update is one conditional UPDATE:
//
//	UPDATE t SET …, fence = $new WHERE id = $id AND fence <= $new
//
// Zero rows means a newer holder wrote first (ErrStaleFence, with the stored
// fence in *StaleFenceError) or the row does not exist (sql.ErrNoRows).
//
// # Guarantees
//
// What holds:
//   - At most one live lease per name at any instant as seen by the lock
//     server (Redis key, PostgreSQL lock table).
//   - A holder's context is cancelled as soon as its backend reports the
//     lease gone, and at the latest when the TTL it last renewed may have run
//     out (redislock) or when the check of its session fails (pglock).
//   - Fences of one name only grow: per name in Redis (seeded from the Redis
//     server clock, so a counter lost with a restart resumes higher), from a
//     PostgreSQL sequence in pglock.
//   - A stale holder's fenced write is refused by the database, even when it
//     still believes it holds the lock.
//
// What does not hold:
//   - A lock is not exactly-once. A holder can be paused (GC, SIGSTOP, a slow
//     disk) past its TTL and keep running for a moment after a newer holder
//     started; only fenced or conditional writes keep the data right then.
//   - Process crash: a dead holder's Redis lock stays until its TTL elapses;
//     a PostgreSQL session lock goes as soon as the server notices the dead
//     connection. Nothing is rolled back for the holder; that is the job of
//     the transaction it wrote in.
//   - Clock jumps: holders measure the TTL with Go's monotonic clock, so a
//     wall-clock jump on a client changes nothing. Redis expires keys by its
//     own wall clock: a forward jump on the Redis host expires locks early
//     (holders learn it at their next renewal, ≤ ttl/3 later); fences keep
//     writes ordered meanwhile.
//   - Redis failover (replica promoted before it saw the lock) can grant the
//     same name twice; this package does not implement Redlock. Fences, not
//     the lock, are what protects data then.
package lock
