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
//	store, _ := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
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
// request fingerprint, the owner's token, the fence, the result, and three
// times in unix microseconds read from the database's clock: created_at,
// lease_until and expires_at. Migrate applies the embedded migrations (one
// directory per dialect under migrations/) and records them in
// Table+"_migrations"; it holds a database lock while it works, so every
// instance may run it at start-up.
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
// Complete, Release and Extend are one UPDATE each that compares the owner
// token in its WHERE clause; no matching row means idem.ErrLeaseLost. On
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
//     (two). max_allowed_packet must exceed Config.MaxResult. Set timeout=
//     for the connect timeout. The clock is UTC_TIMESTAMP(6), independent of
//     the session time zone.
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
// idem.ErrUnavailable (a cancelled context is returned as is): callers fail
// closed, nothing executes unprotected. Errors never contain the DSN's
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
// fence.
package sqlstore
