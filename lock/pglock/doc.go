// Package pglock provides PostgreSQL advisory locks through database/sql
// (the pgx stdlib driver or any PostgreSQL driver), in two forms:
//
//   - Session level (Acquire, TryAcquire): pg_advisory_lock on a connection
//     pinned from the pool (*sql.Conn) for the life of the lease. The unlock
//     is sent on that same connection. A connection whose unlock failed, or
//     whose session turned out not to hold the lock any more, is closed
//     (Raw returning driver.ErrBadConn) instead of going back to the pool,
//     so a pooled connection never carries a stray lock.
//   - Transaction level (AcquireTx, TryAcquireTx): pg_advisory_xact_lock in
//     the caller's *sql.Tx, released by COMMIT or ROLLBACK. It is the form
//     to use behind PgBouncer in transaction mode, where a session lock
//     would stay on a server connection that other clients then use.
//
// # Lock keys
//
// A name becomes the bigint key Key(Config.Namespace, name): the first 8
// bytes of SHA-256(namespace, 0x00, name). Two names collide with
// probability 2^-64; a collision only makes them wait for each other.
// Advisory locks are per database, not per schema: give each application its
// own Namespace.
//
// # Fences
//
// With fences on (the default), the lock statement also draws nextval from
// a sequence (Config.FenceSequence, created by Migrate), in the same
// statement and only after the lock is granted, so a later holder of a name
// gets a larger fence than an earlier one. A sequence survives crashes and
// restarts (nextval makes its transaction flush the sequence's WAL at
// commit). It can go back only through setval, ALTER SEQUENCE RESTART, a
// restore from an older backup, or a failover to an asynchronous replica
// that had not received the latest sequence WAL; then FencedTable refuses
// the new holders' writes (*lock.StaleFenceError carries the stored fence)
// until setval lifts the sequence above it. Data stays right; work stalls.
// Fences are global, not per name: they grow by more than one between two
// acquisitions of one name, which FencedTable does not mind.
//
// # Waiting
//
// Acquire waits in the server (pg_advisory_lock, woken as soon as the holder
// unlocks) in slices of at most a second, bounded with lock_timeout set for
// that statement only; between slices it checks its context. A waiter that
// is cancelled mid-slice loses its connection (pgx closes it), and its
// backend may linger until the slice ends. Every waiting Acquire and every
// lease holds one pool connection: bound the pool with SetMaxOpenConns.
//
// # Isolation of AcquireTx
//
// AcquireTx and TryAcquireTx take the lock only in a READ COMMITTED
// transaction (PostgreSQL's default); in a REPEATABLE READ or SERIALIZABLE
// one they take nothing and return an error wrapping ErrIsolation, decided
// by the lock statement itself. Such a transaction's snapshot is taken by its
// first statement, before the lock is granted: the double check inside the
// lock would read the state as it was before the previous holder's commit,
// and both would act. Under a server whose default_transaction_isolation is
// repeatable read, begin the transaction with sql.LevelReadCommitted, or hold
// a session lock (Acquire) around the stricter transaction, whose snapshot
// then starts after the grant.
//
// # Guarantees
//
// What holds:
//   - Crash of a holder process: the server frees its session locks as soon
//     as it sees the connection close (tested by SIGKILLing a child).
//   - The session dies (pg_terminate_backend, network cut, server restart):
//     the server frees the lock at once; the holder learns it at its next
//     check (Config.CheckInterval, a ping on the pinned connection): its
//     context is cancelled with lock.ErrExpired, and Release reports it and
//     discards the connection. Between the death and the check the holder
//     does not know, and Lease.Valid (no round trip) reports what the last
//     check knew: fences protect its writes.
//   - Server restart or crash: every advisory lock is gone (they live in
//     memory only) and every session with it; the fence sequence survives
//     (WAL), so fences keep growing.
//   - Clock steps, on the client or the server, do not matter: nothing here
//     depends on time except the check interval.
//
// What does not hold:
//   - A restore from an older backup or snapshot, or a failover to an
//     asynchronous replica that had not received the latest sequence WAL:
//     the sequence goes back and new holders may get fences already handed
//     out. FencedTable then refuses their writes (the rows carry the newer
//     fences): data stays right, work stalls until setval lifts the sequence
//     above the largest fence stored. A failover also drops every lock (the
//     new primary has none), so two holders can run at once for a moment.
//   - A session lock behind a transaction-mode pooler; a lock that outlives
//     an idle_session_timeout or tcp keepalive the server applies to the
//     pinned connection.
//   - A paused holder keeps its session lock: locks have no TTL here, so a
//     holder that stops for an hour blocks the name for an hour unless its
//     session is ended by the server.
package pglock
