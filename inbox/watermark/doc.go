// Package watermark applies versioned events to entity rows in order:
// "dedup is not ordering". The inbox stops the same message from applying
// twice, but v5 and v7 of an account are different messages; if v7 arrives
// first, v5 must not overwrite it. Each entity row carries the version of
// the last event applied (its watermark) and a tombstone flag.
//
//	accounts, _ := watermark.New("account", &watermark.Config{Dialect: inbox.Postgres})
//	// inside an inbox Handler:
//	res, err := accounts.Upsert(ctx, tx, evt.AccountID, evt.Version, map[string]any{"balance": evt.Balance})
//
// # Sections
//
//   - Mode LastWriterWins: UPDATE … SET …, version = v WHERE id = ? AND
//     version < v; versions may be skipped. Result Applied, Stale (the row
//     is newer) or Duplicate (the row is at exactly v).
//   - Mode Strict: UPDATE … WHERE id = ? AND version = v-1 (version 1
//     inserts); a missing predecessor is ErrGap. The Handler returns it;
//     ErrGap wraps inbox.ErrNotYet, so inbox.Process parks the event (rolls
//     back, waits with backoff, runs it again; bounded by
//     inbox.Config.EarlyRetries and counted in inbox.Stats.EarlyRetries)
//     and, if the predecessor still has not come, returns it for the broker
//     to redeliver later. A gap is never poison: nothing is wrong with the
//     event, it is early. No lock is held while it waits.
//   - Upsert: a missing row is inserted (INSERT … ON CONFLICT (id) DO
//     NOTHING; MySQL: ON DUPLICATE KEY UPDATE id = id).
//   - Delete: keeps a tombstone (deleted = true, version = v), so a late
//     update with an older version stays Stale and cannot resurrect the row.
//     Only a newer version brings it back.
//
// # Guarantees
//
// Every write is one conditional statement decided by the database (rows
// affected), never a read followed by a write. When nothing was written, a
// locking read (FOR UPDATE; SQLite has one writer) classifies why. If a
// concurrent transaction inserted the row between the update and the insert,
// the update is retried (bounded). On MySQL/MariaDB the insert comes first
// (INSERT … ON DUPLICATE KEY UPDATE id = id locks the row exclusively):
// under REPEATABLE READ an update of a missing row takes a gap lock, and
// concurrent first writes of one key, each holding one, deadlocked on their
// inserts (1213 in most tries before); now they queue. Deadlocks that remain
// possible elsewhere in a transaction are run again by inbox.Process. Versions start at 1. Works on PostgreSQL,
// MySQL/MariaDB and SQLite, inside any transaction (usually the inbox
// Handler's, so the dedup row, the entity and its watermark commit together).
//
// Requirements and limits: the table needs a unique key column, an integer
// version column and a boolean deleted column (names configurable); columns
// a tombstone insert leaves out must be nullable or have defaults. On MySQL
// the connection must keep the driver's default clientFoundRows=false (with
// it, "inserted" and "already present" cannot be told apart). Ordering is
// per entity key only; nothing orders events of different entities.
package watermark
