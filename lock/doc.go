// Package lock is idem's distributed mutual exclusion: the last layer of the
// defence in depth (docs/guarantees.md), for critical sections that span several resources
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
// This package depends on the standard library only (and idem's own
// stdlib-only identifier checker). The backends live in their own packages,
// so importing one never drags in the other's client:
//
//   - redis/redislock: SET NX PX with a random token, Lua compare-and-delete
//     and compare-and-extend, a watchdog that renews every ttl/3, and a
//     local deadline that cancels the holder's context before the lock can
//     expire, without waiting for Redis.
//   - lock/pglock: PostgreSQL advisory locks, session-level on a pinned
//     connection or transaction-level inside the caller's *sql.Tx.
//
// # Using a lock
//
// Do acquires, runs a function under the lease's context with its fence, and
// releases. Inside, repeat the double check: re-read the state and
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
// # When a lock is not granted
//
// An error wrapping ErrNotAcquired says another owner holds the lock (or
// held it for the whole wait); one wrapping ErrUnavailable says the backend
// could not be reached, so that an alert can tell an outage from
// contention. An Acquire whose wait ran out during an outage wraps both.
//
// # Leases and their context
//
// A Lease's Context is cancelled, with a cause, when the lease is lost
// (errors.Is(context.Cause(ctx), ErrNotHeld) or ErrExpired, see IsLost), when
// it is released (ErrReleased) and when the context given to Acquire is done.
// Release never deletes a lock that now belongs to another owner.
//
// Lease.Valid is the synchronous form of that check, for a holder that may
// have been paused: call it right before an action that must not happen
// twice. With redislock it compares the local deadline with the monotonic
// clock, so it is right even when the watchdog has not run since the pause.
// Inside Do, call Valid(ctx) with fn's context (or one derived from it):
//
//	err := lock.Do(ctx, locker, "refund:"+id, func(ctx context.Context, fence lock.Fence) error {
//		… long preparation …
//		if err := lock.Valid(ctx); err != nil {
//			return err // paused past the lease: another holder may be running
//		}
//		return refunds.Update(ctx, db, id, fence, "state = $1", "sent")
//	})
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
//   - A redislock holder's context ends before its lock can expire in Redis
//     (the local deadline, TTL − SafetyMargin after the last successful
//     renewal was sent), whether or not Redis answers. A pglock holder's
//     context ends when a check of its session fails.
//   - Fences of one name are unique and only grow: in Redis each one is the
//     larger of the counter + 1 and the Redis server's clock in
//     microseconds, so a counter that went back with a restart, a snapshot
//     restore or a failover resumes above every fence handed out; in
//     PostgreSQL they come from a sequence.
//   - A stale holder's fenced write is refused by the database (FencedTable,
//     fsm's Options.Fence), even when it still believes it holds the lock.
//
// Under faults, per backend (details in each package):
//
//	                        redislock                       pglock
//	holder crash            lock until TTL, then next       lock freed when the
//	                        holder, larger fence            server sees the socket close
//	server restart          lock lost; holders learn        session locks lost; holders
//	                        ≤ TTL/3; fences still grow      learn at next check; sequence kept
//	older snapshot/backup   fences still grow (TIME)        sequence may go back: writes refused
//	failover (async)        two holders possible;           two holders possible; sequence may
//	                        fences grow if clocks agree     go back: writes refused, setval repairs
//	client clock step       nothing (monotonic)             nothing
//	server clock step       forward: keys expire early;     nothing
//	                        back: counter keeps order
//
// What does not hold:
//   - A lock is not exactly-once. A holder can be paused (GC, SIGSTOP, a slow
//     disk) past its TTL and keep running for a moment after a newer holder
//     started; Valid narrows that window, only fenced or conditional writes
//     close it.
//   - Process crash: nothing is rolled back for the holder; that is the job
//     of the transaction it wrote in.
//   - Redis failover to a replica that had not seen the lock, or a restart
//     that lost it, can grant the same name twice; this package does not
//     implement Redlock. Fences, not the lock, are what protects data then.
//   - Fence order in Redis after a data loss combined with the server's
//     clock stepping back further than the time since the last acquisition:
//     fences may repeat, FencedTable refuses the new holder, and
//     redislock's RaiseFence repairs the counter.
package lock
