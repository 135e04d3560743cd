// Package sqlmigrate applies a package's embedded schema migrations, once
// each and in order, however many processes start at the same moment. It is
// the one runner behind sqlstore, inbox and onetime/sqltoken's Migrate.
//
// A package keeps its migrations next to its code, one directory per
// dialect, as files named NNN_name.sql (NNN a positive version number). Load
// reads a directory and fills in the placeholders ({{table}} and the like);
// Run applies the versions not yet recorded in the package's version table
// and records them.
//
// # Files
//
// A file holds one or more statements, each ending with ";" at the end of a
// line. Lines that are only a "--" comment are dropped; a comment after code
// on a line stays with its statement. No statement may end a line with ";"
// inside a string literal or a body (there are no triggers or procedures).
// A release only ever adds files: a version once shipped is never edited.
//
// # Serialisation
//
// Run holds a lock in the database while it reads the recorded versions and
// applies the missing ones, so concurrent runners take turns and each
// version is applied once:
//
//   - PostgreSQL: pg_advisory_xact_lock inside one transaction, which also
//     holds every statement (DDL is transactional there).
//   - MySQL and MariaDB: GET_LOCK on a dedicated connection, waiting up to
//     60 s, released with RELEASE_LOCK.
//   - SQLite: BEGIN IMMEDIATE, which takes the database's write lock
//     (waiting up to the connection's busy_timeout). SQLite answers a
//     connection that opens a new file while another switches it to WAL
//     with SQLITE_BUSY at once, busy_timeout or not: Run retries the
//     connection and the BEGIN while SQLite answers busy, for up to a
//     minute or until the context ends.
//
// The lock key is the caller's: an SQL expression of one bind parameter
// (Config.LockKey and LockArg), so each package keeps the key it has always
// used and a binary from before sqlmigrate and one from after still take
// turns.
//
// # Guarantees
//
// Under a crash (the process dies mid-run): PostgreSQL and SQLite roll the
// whole run back, schema changes and version rows alike, and the next Run
// starts again. MySQL commits every DDL statement on its own, so a run
// killed between two statements leaves the earlier ones applied and the
// version unrecorded; the next Run applies the file again. There a
// statement that MySQL refuses because what it creates exists (a table,
// a column or an index: errors 1050, 1060, 1061) counts as applied, since
// MySQL has no ADD COLUMN IF NOT EXISTS; every other statement of a MySQL
// migration must be re-runnable (an UPDATE that converts rows, not one
// that counts them). The server releases a dead session's lock. A Galera
// cluster replicates DDL but not GET_LOCK, so runners on different nodes
// meet the same case at once; sqlstore's Migrate runs again after it.
//
// Under an outage or a failing statement: Run returns an error naming the
// file that failed, after rolling back where the dialect allows (all but
// MySQL DDL), and the connection it used is discarded rather than returned
// to the pool, so no lock or open transaction outlives the call.
//
// The clock plays no part. What is not promised: a MySQL runner that waits
// more than 60 s for the lock gives up with ErrLockTimeout; versions found
// in the table but unknown to this binary (a newer release ran) are left
// alone; nothing is ever migrated down.
package sqlmigrate
