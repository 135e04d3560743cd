// Package optlock is optimistic locking: a version compare-and-set on a SQL
// row, retried a bounded number of times.
//
// Two requests read an account at version 7, both subtract 100 from the
// balance they read, both write. Without a check the second write silently
// undoes the first. With one,
//
//	UPDATE accounts SET balance = 900, version = version + 1
//	WHERE id = 1 AND version = 7
//
// the second write matches no row: its read is stale, and it must read again
// and decide again. No lock is held between the read and the write, which
// makes this the cheapest way to keep concurrent writers from overwriting each
// other on low-contention rows (balances, settings, profiles). Under heavy
// contention most attempts are wasted; a hot row wants a single conditional
// statement (balance = balance - 100 WHERE balance >= 100) or a lock instead.
//
// # Usage
//
// Table.Update issues the compare-and-set and returns ErrConflict when it
// affected no row. Do runs a read-modify-write callback until it stops
// conflicting, with jittered exponential backoff between attempts and a bound
// on their number, honouring the context:
//
//	accounts, _ := optlock.NewTable(optlock.Postgres, "accounts", nil)
//	err := optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
//		var balance, version int64
//		if err := db.QueryRowContext(ctx, "SELECT balance, version FROM accounts WHERE id = $1", id).
//			Scan(&balance, &version); err != nil {
//			return err
//		}
//		if balance < amount {
//			return ErrInsufficientFunds // not a conflict: returned at once
//		}
//		return accounts.Update(ctx, db, id, version, map[string]any{"balance": balance - amount})
//	})
//	if errors.Is(err, optlock.ErrConflict) {
//		// every attempt lost; nothing was written by this call
//	}
//
// The callback may run its read and write in its own transaction, or take a
// *sql.Conn; Update accepts *sql.DB, *sql.Tx and *sql.Conn.
//
// # How often fn runs
//
// Do calls fn up to Config.MaxAttempts times (default 5), once per
// conflicting attempt. Everything fn does besides the guarded write runs that
// often: a conflicting attempt wrote nothing to the row, but an e-mail sent, a
// message published or a row inserted elsewhere from inside fn is repeated.
// Keep fn to reads and the compare-and-set, or make its other effects
// idempotent.
//
// What the defaults yield under contention, measured by BenchmarkContention
// (W writers incrementing one row through 4 pooled connections; medians of
// 5 runs of 1000 increments on the shared 2-core dev machine, see
// BENCHMARKS.md):
//
//	writers  PostgreSQL            MariaDB               SQLite
//	2        1.02 calls, 0.2% gave up   1.21 calls, 0.5%      1.01 calls, 0%
//	10       1.58 calls, 5.1%          1.75 calls, 2.2%      1.02 calls, 0%
//	50       2.77 calls, 11.6%         2.36 calls, 5.7%      1.01 calls, 0%
//
// ("calls" is fn calls per successful increment; "gave up" the share of Do
// calls that ended with ErrConflict after 5 attempts. SQLite serialises its
// writers, so they rarely conflict.) A caller that must not fail under that
// contention raises MaxAttempts, retries Do later, or, better for a hot row,
// writes one conditional statement (balance = balance + 1) or takes a lock.
//
// # Versions
//
// Update always writes version = version + 1 in the same statement, so the new
// version is the one passed plus one. Zero is a version like any other: the
// check is never skipped for a zero value (an ORM bug this package does not
// repeat). The bump also keeps MySQL and MariaDB honest: they report changed
// rows, not matched rows, unless the DSN sets clientFoundRows=true, so an
// UPDATE that writes the values a row already has would report 0 rows and look
// like a conflict. Because the version always changes, the row always changes,
// and 1 row means success with either DSN.
//
// # Guarantees
//
// No lost update: among writers that read the same version, at most one write
// applies; the others get ErrConflict and write nothing. Tested with 50
// goroutines doing 20 increments each on one row, on PostgreSQL, MariaDB and
// SQLite, with MaxAttempts 10, BaseDelay 1ms, MaxDelay 10ms and a pool of 4
// connections; a Do call that runs out of attempts is called again, as a
// caller would later. The result is exactly 1000, with 1000 successful
// writes: none lost, none applied twice. (With the defaults some Do calls
// give up under that load, see above; that costs retries, never an update.)
//
// Set keys are checked, ignoring case, against the id and version columns:
// unquoted SQL identifiers are case-insensitive, and on MySQL and SQLite a
// second assignment "VERSION = 7" after the bump would win and void the
// check.
//
// Store restart, snapshot restore, failover: the version lives in the row,
// so it is as durable as the row. A write whose commit was lost with a
// restart or a failover is lost with its version bump; the next writer reads
// the older version and writes over it, which is what the database now holds.
// What does not hold across a restore from an older backup (or a failover to
// a replica that missed writes): versions are reused. A writer that read
// version 7 before the restore succeeds if the restored row has climbed back
// to version 7 with other data (ABA). A read-modify-write that spans such an
// event is not protected; one that starts after it is.
//
// Crash: the compare-and-set is one statement. A writer killed before its
// commit leaves the row and its version as they were (the database rolls back),
// so the next writer holding that version succeeds; tested by killing a real
// process. Nothing is held between the read and the write, so a dead reader
// blocks nobody.
//
// Outage: database errors are returned wrapped and are never retried as
// conflicts; a retry policy for outages belongs to the caller. If the
// acknowledgement of a successful write is lost, a retry of the callback
// reads the new version and decides again: make the decision idempotent
// (store what it did, or guard it with an idempotency key) when running it
// twice would be wrong.
//
// Clock jump: time only paces the backoff; correctness never reads a clock.
//
// Not promised: protection across rows or services (a version guards one row;
// use a transaction or a lock for more), or progress under heavy contention
// (Do gives up after Config.MaxAttempts and says so with ErrConflict).
package optlock
