// Package sqltoken keeps onetime tokens in a SQL table through database/sql:
// PostgreSQL (pgx), MySQL/MariaDB (go-sql-driver/mysql) and SQLite
// (modernc.org/sqlite, the embedded default).
//
//	db, _ := sql.Open("sqlite", "file:app.db?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
//	store, _ := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
//	_ = store.Migrate(ctx)
//	tokens, _ := onetime.New(store, nil)
//
// # Schema
//
// One row per token: SHA-256 of the token (primary key) and of its scope,
// created_at and expires_at in unix microseconds by the database's clock,
// and, once spent, the spender's Use (used_by, used_fence, used_at). The
// embedded migrations (migration/<dialect>/NNN_*.sql) run with Migrate,
// which records applied versions in <Table>_migrations and is safe to run
// from several processes at once.
//
// # Atomicity
//
// Consume is one conditional UPDATE:
//
//	UPDATE t SET used_by = :use, used_fence = :fence, used_at = NOW
//	WHERE token_hash = :tok AND scope_hash = :scope AND expires_at > NOW
//	  AND (used_by IS NULL OR (used_by = :use AND used_fence <= :fence))
//
// One row affected means this call spent the token; the database's row lock
// lets exactly one of any number of concurrent callers match. The same
// statement works on all three dialects (DELETE … RETURNING would work on
// PostgreSQL and SQLite only, and would erase the evidence needed to tell a
// used token from an unknown one). Tokens are marked, not deleted, and
// Purge removes them after their expiry plus a grace period.
//
// Only when no row was affected does Consume read the row, to tell unknown,
// foreign scope, used and expired apart. That read decides nothing: the
// caller already lost. If the read finds the token consumable again (it was
// restored between the two statements), Consume decides again with the
// UPDATE, at most three times, then reports ErrUsed.
//
// On MySQL the affected-row count is the number of changed rows; the
// statement always changes used_at, and a re-take by the same Use that
// happens to change nothing is recognised by the classification read.
//
// # Guarantees
//
//   - Crash of the application after Consume: the token stays spent; a
//     later owner of the same idempotency record re-takes it (onetime.Use).
//   - Database outage: every call fails with an error matching
//     idem.ErrUnavailable; nothing is assumed.
//   - Clock: expiry is decided by the database's clock (PostgreSQL
//     clock_timestamp(), MySQL UTC_TIMESTAMP(6), SQLite unixepoch). A jump of
//     that clock shortens or lengthens the remaining life of every token; a
//     jump of the application hosts' clocks changes nothing.
//   - Retention: used and expired tokens stay until Purge deletes them
//     (grace after their expiry); from then on they are ErrUnknown.
//   - SQLite: writers serialise on the database lock; busy_timeout makes
//     them wait instead of failing with SQLITE_BUSY.
package sqltoken
