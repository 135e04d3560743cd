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
// # Guarantees
//
//   - Crash of a holder process: the server frees its session locks as soon
//     as it sees the connection close (tested by SIGKILLing a child).
//   - The session dies (pg_terminate_backend, network cut, server restart):
//     the server frees the lock at once; the holder learns it at its next
//     check (Config.CheckInterval, a ping on the pinned connection): its
//     context is cancelled with lock.ErrExpired, and Release reports it and
//     discards the connection. Between the death and the check the holder
//     does not know: fences protect its writes.
//   - Clock jumps do not matter: nothing here depends on time except the
//     check interval.
//   - Not promised: a session lock behind a transaction-mode pooler; a lock
//     that outlives an idle_session_timeout or tcp keepalive the server
//     applies to the pinned connection.
package pglock
