// Package sqlstore is an idem.Store on a SQL database through database/sql:
// PostgreSQL (pgx's "pgx" driver), MySQL or MariaDB (go-sql-driver/mysql),
// and SQLite (modernc.org/sqlite, pure Go: the embedded default).
//
// The database's unique index on the key is the judge of who executes: a
// retry, a redelivery or a double click that reaches any instance of the
// service finds the record its first delivery made. When the business data
// lives in the same database, CompleteTx records the result inside the
// business transaction, so the change and its record commit together.
//
//	db, _ := sql.Open("pgx", os.Getenv("DATABASE_URL"))
//	store, _ := sqlstore.New(db, nil) // the defaults; the dialect of db's driver
//	if err := store.Migrate(ctx); err != nil { … } // or `idem migrate`
//	receipt, err := idem.Do(ctx, store, key, nil, charge)
//
// This package imports no driver; import the one you use.
//
// # Schema
//
// One table (Config.Table, default "idem_records") keyed by the 32-byte
// SHA-256 digest of scope and key; the raw key and scope are never stored.
// Each row holds the state (1 in progress, 2 completed, 3 released), the
// request fingerprint, the owner's token, the fence, the result, the
// started mark (MarkStarted, version 2 of the schema), the held mark of a
// completed record (Hold, version 3: migration 0003 also marks the records
// that earlier releases held, told by their outcome-unknown result; run it
// when no process of an earlier release writes to the table), and three
// times in unix microseconds read from the database's clock: created_at,
// lease_until and expires_at. Migrate applies the embedded migrations (one
// directory per dialect under migrations/) and records them in
// Table+"_migrations"; it holds a database lock while it works, so every
// instance may run it at start-up. Version 4 adds Table+"_steps", the
// recovery points of package step (SaveStep, SaveStepTx, Steps), keyed by
// the digest and the step name.
//
// # Statements
//
// Begin is decided by the database, never by a read followed by a write
// decided in Go:
//
//   - PostgreSQL: one statement inserts the record (INSERT … ON CONFLICT DO
//     NOTHING, which takes no lock and writes nothing when the key exists)
//     or returns the existing one. A first claim and a replay each cost one
//     round trip; Complete is one more.
//   - MySQL and SQLite: a read (a replay is this read alone), then, for a
//     new key, INSERT IGNORE / INSERT … ON CONFLICT DO NOTHING, whose
//     rows-affected says who won.
//   - A record that exists but is free (expired, released, or in progress
//     with an expired lease and the same fingerprint) is re-claimed by a
//     conditional UPDATE that matches only the version that was read (fence
//     and state) and checks again, by the database clock, that it is free.
//     If another caller changed the record in between, the UPDATE matches
//     nothing and Begin reads again (a bounded loop).
//
// Complete, Release, Extend and MarkStarted are one UPDATE each that
// compares the owner token in its WHERE clause; no matching row means
// idem.ErrLeaseLost. A takeover keeps the started mark (the UPDATE copies it
// when the record was in progress and unexpired) and a fresh acquisition or
// Release clears it.
//
// An Acquired answer carries the whole lease, measured after any wait for a
// row lock (a CompleteTx transaction holding the record, say). MySQL's
// clock adds the time the statement has waited (SYSDATE(6) - NOW(6)), so
// the UPDATE computes the lease when it gets the row; PostgreSQL computes
// the new row before it waits, so Begin reads the clock again in RETURNING
// and, if the wait consumed more than 2% of the lease, renews it with an
// owner-compare UPDATE before it answers (and starts over if the claim was
// taken over meanwhile).
//
// Serialization failures and deadlocks (PostgreSQL 40001 and 40P01, which
// appear when the server or role sets default_transaction_isolation to
// repeatable read or serializable; MySQL 1213) are retried inside the store,
// a bounded number of times, with a short random pause: each statement is
// its own transaction and safe to run again. Contention is never reported
// as unavailable. Inside CompleteTx the caller's transaction lost the race
// and must be retried by the caller: that error is returned as it is, not
// as unavailable. On
// MySQL every such UPDATE also increments a rev column, because MySQL's
// rows-affected counts changed rows, not matched ones: a repeated Complete
// by its owner must not look like a lost lease. A repeated Complete keeps
// the result stored first. Purge deletes expired rows in batches with the
// expiry checked again by the DELETE, so a record re-claimed meanwhile
// survives.
//
// # Drivers and pools
//
//   - PostgreSQL: any DSN pgx accepts; set connect_timeout (seconds) so an
//     unreachable server fails fast. clock_timestamp() is the clock, never
//     now(), which would be the start of the caller's transaction.
//   - MySQL/MariaDB: add interpolateParams=true to the DSN: the driver then
//     sends each statement in one round trip instead of preparing it first
//     (two). The store reads max_allowed_packet (in Migrate, or before the
//     first large Complete) and refuses a result that would not fit, as
//     statement text, with idem.ErrResultTooLarge; idem.Do then leaves a
//     terminal "not replayable" record instead of running again. Set
//     timeout= and readTimeout= for connect and read timeouts. The clock is
//     UTC_TIMESTAMP(6), independent of the session time zone, plus the
//     statement's row-lock wait; do not run the server with
//     --sysdate-is-now.
//   - SQLite: use SQLiteDSN(path): WAL, busy_timeout, synchronous(FULL) and
//     BEGIN IMMEDIATE transactions. SQLite has one writer at a time; each
//     write here is a single short statement and waits for the lock up to
//     busy_timeout, so hundreds of goroutines racing for one key are fine
//     (the conformance suite runs 200). Do not set MaxOpenConns(1): replays
//     read in parallel under WAL, and Do's lease heartbeat needs a
//     connection while your CompleteTx transaction holds another.
//   - Server pools: keep MaxOpenConns below the server's max_connections;
//     a burst beyond it then queues in database/sql instead of failing.
//
// # Guarantees
//
// At most one owner holds a key at a time, by the database clock: a claim
// is exclusive until its lease_until, and after that only a caller with the
// same fingerprint takes it over, with a new token and a greater fence. The
// stale owner's Complete, Release and Extend match no row.
//
// A crash of the caller's process between its business change and
// Complete leaves the claim in progress; after the lease a retry takes it
// over and executes again. CompleteTx closes that window: the completion is
// part of the business transaction, so after a crash either both are
// committed (a retry replays) or neither is (a retry executes once). While
// that transaction is open, a retry that finds the lease expired waits on
// the row lock and then replays; it never executes alongside. The test
// suite kills a real process just before and just after such a commit.
//
// A database outage makes every call fail with an error matching
// idem.ErrUnavailable: callers fail closed, nothing executes unprotected. A
// driver's own connect or read timeout is unavailable too; the context's
// error is returned only when the caller's context has ended. Errors never contain the DSN's
// password (this package never sees the DSN; the drivers leave it out).
//
// Leases, expiries and fences follow the database's clock only, so clients'
// clocks never matter. A database clock that jumps forward expires leases
// early: a live owner can then be taken over (its writes are refused, but
// its side effects outside the database are not undone, which is why the
// fence exists). A clock that jumps back lengthens leases and retention.
// Fences stay increasing through both while the record exists (each is
// max(previous + 1, clock)); after a purge the new fence is the clock,
// which is above every purged fence unless the clock went back by more
// than the retention.
//
// Not guaranteed: exactly-once effects outside the database. A handler that
// charges a card and crashes before Complete is run again after the lease;
// make such effects idempotent at their receiver, or conditional on the
// fence, or run them with idem.Options.AtMostOnce (the key is then held as
// outcome-unknown instead of run twice).
//
// # Replication
//
// A record survives a failover of the database only if the replica that
// is promoted had it when the Store acknowledged it (docs/replication.md).
// Store.Replication (idem.ReplicationReporter) reads how the server
// replicates and reports a single server, synchronous replication,
// asynchronous replicas, or unknown:
//
//   - PostgreSQL: from the Store's own session, synchronous_standby_names
//     (set: synchronous; commits wait for the standbys it names, even when
//     none is attached: they wait rather than being acknowledged
//     unreplicated), pg_is_in_recovery() (on a standby: unknown) and the
//     WAL senders of pg_stat_replication, minus base backups and logical
//     replication (empty names with senders: asynchronous; with none:
//     single). A role without pg_read_all_stats (or pg_monitor) sees the
//     senders but not their state; the verdict does not need it.
//   - MySQL and MariaDB: semi-synchronous replication, Galera, plain
//     replicas.
//   - SQLite: a single server, without I/O.
//
// While the verdict is asynchronous, Begin refuses to grant claims with an
// error matching idem.ErrAsyncReplication and idem.ErrUnavailable that
// names the setting to change, unless Config.AllowAsyncReplication. A
// single server, synchronous replication and unknown (managed services
// often hide pg_stat_replication) are allowed. Complete, Release, Extend,
// MarkStarted and Resolve are never refused: the work has already run.
// The first Begin reads the verdict (the Begins that arrive meanwhile wait
// for it); after that, the first Begin that finds it older than
// Config.ReplicationCheck (10s by default) reads it again while the others
// go by the last one: no background goroutine. A standby that attaches
// asynchronously is noticed within that interval; one that goes away makes
// the server single again.
//
// On PostgreSQL every write of the Store (Begin, Complete, Release,
// Extend, MarkStarted, Resolve) sets synchronous_commit to
// Config.SynchronousCommit (on, or remote_apply) inside its own statement
// (set_config(…, true) in a CTE the write joins, so it is evaluated before
// any row is written and lasts until the statement's implicit commit): a
// DSN's options=-c synchronous_commit=off, or a role's setting, cannot
// weaken it, and it costs no round trip. CompleteTx runs in the caller's
// transaction, whose level applies: call PinSynchronousCommit in it when
// the DSN or role may weaken it. Purge is not pinned (a purge lost in a
// failover deletes its expired records again later).
//
// # Faults
//
// What holds, and what does not, when the database misbehaves. The fault
// suite (idemtest.RunFaults) runs on PostgreSQL and MariaDB through a TCP
// fault proxy, and on a private PostgreSQL that it crash-restarts; SQLite
// has no network and no server to restart (a killed process is covered by
// the crash tests).
//
//   - Lost reply, reset in mid-reply, black hole: the call returns an
//     unavailable error by its context's deadline (or the driver's timeout),
//     never a partial result. A claim made by a Begin whose reply was lost
//     holds the key for one lease at most, then a retry takes it over; a
//     Complete whose reply was lost is resent by its owner and succeeds,
//     keeping the first result. No change is ever applied twice: every
//     statement is idempotent for its owner or decided by the row's version.
//   - Server restart (crash and WAL recovery): every committed record,
//     result and mark survives; pooled connections fail once, as
//     unavailable, and the pool reconnects. Fences keep growing.
//   - Snapshot restore (a backup, PITR to an earlier point): records written
//     after the snapshot are gone. A key completed after it runs again; a
//     claim made after it is forgotten. Fences may then repeat values issued
//     after the snapshot, unless the clock has moved past them (fences are
//     at least the clock in microseconds). Treat a restore like a crash of
//     every caller that was active since the snapshot.
//   - Failover to a synchronous replica: as a restart (PostgreSQL: tested
//     by idemtest.RunFailover, 3 failovers with SIGKILLed primaries, 0
//     acknowledged records lost, 0 keys run twice). To an asynchronous
//     replica: as a snapshot restore to the replica's lag; commits it had
//     not received are lost, with the consequences above. The Store refuses
//     that configuration unless told otherwise (see Replication).
//   - Clock step on the database server: see the guarantees above; leases
//     and expiries move with the step, fences do not go back while the
//     record exists.
//   - SQLite: a crash or power cut loses nothing committed (synchronous
//     FULL with WAL); a restored copy of the file is a snapshot restore.
package sqlstore
