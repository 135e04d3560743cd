package inbox

import (
	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/sqlerr"
)

// Dialect names the SQL database behind an Inbox. It decides the statements:
// placeholders, the "insert unless present" form and how time is read. It is
// the same type as fsm.Dialect and optlock.Dialect: inbox.Postgres and
// fsm.Postgres are one value. Its methods are String, Valid and
// Placeholder(n) ($n for PostgreSQL, ? elsewhere).
type Dialect = sqldialect.Dialect

const (
	// Postgres is PostgreSQL through pgx's database/sql driver ("pgx").
	Postgres Dialect = sqldialect.Postgres
	// MySQL is MySQL 8 or MariaDB 10.5+ through go-sql-driver/mysql.
	MySQL Dialect = sqldialect.MySQL
	// SQLite is SQLite through modernc.org/sqlite ("sqlite"). Open it with
	// WAL and a busy timeout, e.g.
	// file:PATH?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000).
	SQLite Dialect = sqldialect.SQLite
)

// statements are the dialect-specific SQL texts of one Inbox, built once in New.
type statements struct {
	insert string // args: consumer, message_id; rows affected 1 = new, 0 = seen
	claim  string // insert without ON CONFLICT: a duplicate fails (Claim)
	probe  string // args: consumer, message_id; one row if present
	sweep  string // args: age in microseconds, limit
}

func buildStatements(d Dialect, table string) statements {
	switch d {
	case Postgres:
		return statements{
			insert: `INSERT INTO ` + table + ` (consumer, message_id, created_at) VALUES ($1, $2, clock_timestamp()) ON CONFLICT (consumer, message_id) DO NOTHING`,
			claim:  `INSERT INTO ` + table + ` (consumer, message_id, created_at) VALUES ($1, $2, clock_timestamp())`,
			probe:  `SELECT 1 FROM ` + table + ` WHERE consumer = $1 AND message_id = $2`,
			// SKIP LOCKED: a row that a redelivery is touching right now is left
			// for the next pass instead of blocking either side. The cutoff is
			// statement_timestamp(), the database clock read once per
			// statement: a STABLE value, so created_at < cutoff is an index
			// condition. (clock_timestamp() is VOLATILE, re-read for every
			// row: the planner can only filter with it, and a pass with
			// nothing to delete walked the whole created_at index.)
			sweep: `DELETE FROM ` + table + ` WHERE (consumer, message_id) IN (SELECT consumer, message_id FROM ` + table +
				` WHERE created_at < statement_timestamp() - $1::bigint * interval '1 microsecond' ORDER BY created_at LIMIT $2 FOR UPDATE SKIP LOCKED)`,
		}
	case MySQL:
		return statements{
			// INSERT IGNORE reports 0 rows for a duplicate key, also with
			// clientFoundRows=true. IDs are validated before, so IGNORE cannot
			// hide a truncation.
			insert: `INSERT IGNORE INTO ` + table + ` (consumer, message_id, created_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
			claim:  `INSERT INTO ` + table + ` (consumer, message_id, created_at) VALUES (?, ?, UTC_TIMESTAMP(6))`,
			probe:  `SELECT 1 FROM ` + table + ` WHERE consumer = ? AND message_id = ?`,
			sweep:  `DELETE FROM ` + table + ` WHERE created_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND ORDER BY created_at LIMIT ?`,
		}
	default: // SQLite: created_at is Unix milliseconds from the database clock.
		const nowMS = `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
		return statements{
			insert: `INSERT INTO ` + table + ` (consumer, message_id, created_at) VALUES (?, ?, ` + nowMS + `) ON CONFLICT (consumer, message_id) DO NOTHING`,
			claim:  `INSERT INTO ` + table + ` (consumer, message_id, created_at) VALUES (?, ?, ` + nowMS + `)`,
			probe:  `SELECT 1 FROM ` + table + ` WHERE consumer = ? AND message_id = ?`,
			sweep: `DELETE FROM ` + table + ` WHERE rowid IN (SELECT rowid FROM ` + table +
				` WHERE created_at < ` + nowMS + ` - (? / 1000) ORDER BY created_at LIMIT ?)`,
		}
	}
}

// IsRetryable reports whether err is a transient concurrency failure of the
// database — a deadlock, a serialization failure, a lock wait timeout or
// SQLite's "database is locked" — after which the whole transaction can be
// run again. Process itself runs the transaction again after a deadlock or a
// serialization failure (a bounded number of times); a lock timeout, which
// has already waited, is returned at once. IsRetryable tells the caller (or
// its broker) that a redelivery will help.
func IsRetryable(err error) bool { return sqlerr.IsRetryable(err) }

// isConflict: the database aborted the transaction for a deadlock, a
// serialization failure or SQLite busy/locked — not a lock wait timeout.
func isConflict(err error) bool { return sqlerr.IsRetryable(err) && !isLockTimeout(err) }

func isLockTimeout(err error) bool {
	if sqlerr.SQLState(err) == "55P03" { // lock_not_available
		return true
	}
	n, ok := sqlerr.MySQLNumber(err)
	return ok && n == 1205 // ER_LOCK_WAIT_TIMEOUT
}
