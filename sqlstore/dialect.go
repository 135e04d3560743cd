package sqlstore

import (
	"database/sql"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/sqldialect"
)

// Dialect selects the SQL a Store speaks. It is the type fsm, optlock,
// inbox and sqltoken use too: sqlstore.Postgres and fsm.Postgres are one
// value. String returns "postgres", "mysql" or "sqlite".
type Dialect = sqldialect.Dialect

// Supported dialects.
const (
	// Postgres: PostgreSQL ≥ 12 through pgx's database/sql driver ("pgx").
	Postgres Dialect = sqldialect.Postgres
	// MySQL: MySQL ≥ 8.0 or MariaDB ≥ 10.5 through go-sql-driver/mysql.
	MySQL Dialect = sqldialect.MySQL
	// SQLite: SQLite ≥ 3.42 through modernc.org/sqlite ("sqlite").
	SQLite Dialect = sqldialect.SQLite
)

// ParseDialect maps a dialect or database/sql driver name ("postgres",
// "postgresql", "pgx", "mysql", "mariadb", "sqlite", "sqlite3"), in any
// case, to its Dialect.
func ParseDialect(name string) (Dialect, error) {
	d, err := sqldialect.ParseName(name)
	if err != nil {
		return 0, fmt.Errorf("sqlstore: %w", err)
	}
	return d, nil
}

// driverDialect returns the dialect of db's driver, told by the package
// that defines the driver's type (no I/O).
func driverDialect(db *sql.DB) (Dialect, bool) {
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return 0, false
	}
	return pkgDialect(t.PkgPath())
}

// pkgDialect maps the import path of a database/sql driver's package to
// its dialect.
func pkgDialect(path string) (Dialect, bool) {
	switch {
	case strings.HasPrefix(path, "github.com/jackc/pgx/") || path == "github.com/lib/pq":
		return Postgres, true
	case path == "github.com/go-sql-driver/mysql":
		return MySQL, true
	case path == "modernc.org/sqlite" || path == "github.com/mattn/go-sqlite3" || strings.HasPrefix(path, "github.com/ncruces/go-sqlite3/"):
		return SQLite, true
	}
	return 0, false
}

// maxTable is the longest Config.Table accepted, in bytes: stricter than
// sqldialect.MaxIdentLen so that the derived names Table+"_migrations" and
// Table+"_expires_at" still fit PostgreSQL's 63-byte limit.
const maxTable = 48

// checkTable reports whether table is a plain identifier of at most
// maxTable bytes.
func checkTable(table string) bool {
	return len(table) <= maxTable && sqldialect.CheckIdent(table, false) == nil
}

// Record states as stored in the state column; they equal idem.State. A
// held record (idem.StateHeld) is completed with the held column set
// (migration 0003); stateCol reads the two as one idem.State.
const (
	stInProgress = 1
	stCompleted  = 2
	stReleased   = 3
)

// stateCol is a record's idem.State: its state column, or 4 (held) for a
// completed record with the held mark.
var stateCol = map[Dialect]string{
	Postgres: "CASE WHEN state = 2 AND held THEN 4 ELSE state END",
	MySQL:    "CASE WHEN state = 2 AND held = 1 THEN 4 ELSE state END",
	SQLite:   "CASE WHEN state = 2 AND held = 1 THEN 4 ELSE state END",
}

// query is one statement with its placeholders in the dialect's syntax.
// Statements are written once with PostgreSQL's numbered placeholders
// ($1, $2…); order lists, for MySQL's positional "?", which argument each
// placeholder takes.
type query struct {
	sql   string
	order []int // nil: arguments are passed as they are
}

func (q query) args(canonical ...any) []any {
	if q.order == nil {
		return canonical
	}
	out := make([]any, len(q.order))
	for i, n := range q.order {
		out[i] = canonical[n-1]
	}
	return out
}

var placeholder = regexp.MustCompile(`\$[0-9]+`)

// build substitutes the table and clock into text and converts the
// placeholders to d's syntax.
func build(d Dialect, table, text string) query {
	text = strings.ReplaceAll(text, "{{table}}", table)
	text = strings.ReplaceAll(text, "{{now}}", nowExpr[d])
	switch d {
	case SQLite: // ?NNN keeps the numbering
		return query{sql: placeholder.ReplaceAllStringFunc(text, func(p string) string { return "?" + p[1:] })}
	case MySQL:
		var order []int
		text = placeholder.ReplaceAllStringFunc(text, func(p string) string {
			n, _ := strconv.Atoi(p[1:])
			order = append(order, n)
			return "?"
		})
		return query{sql: text, order: order}
	}
	return query{sql: text}
}

// nowExpr is the store clock in unix microseconds. Every time the store
// compares or records comes from it, never from the client's clock.
//   - PostgreSQL: clock_timestamp(), the real time, not now() (which is the
//     start of the transaction, possibly the caller's long one in CompleteTx).
//   - MySQL: UTC_TIMESTAMP(6), the statement's start in UTC, independent of
//     the session's time_zone (UNIX_TIMESTAMP(NOW(6)) is ambiguous in the
//     hour a daylight-saving zone repeats), plus the time the statement has
//     run so far: SYSDATE(6) - NOW(6), both in the session's zone, is the
//     time spent waiting for row locks, bounded by the lock wait timeout.
//     A lease computed after an UPDATE waited behind a CompleteTx
//     transaction therefore starts when the row was locked, not when the
//     statement began (that would hand out a lease already spent). This
//     needs SYSDATE to be the real time: do not run the server with
//     --sysdate-is-now.
//   - SQLite: unixepoch('subsec'), millisecond resolution, constant within
//     one statement.
var nowExpr = map[Dialect]string{
	Postgres: `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`,
	MySQL: `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) +
	LEAST(GREATEST(TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)), 0), @@innodb_lock_wait_timeout * 1000000))`,
	SQLite: `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`,
}

// queries are a Store's statements for its dialect and table.
//
// Canonical arguments:
//
//	claim, insert:  $1 key, $2 fingerprint, $3 token, $4 lease µs, $5 retention µs
//	read:           $1 key, $2 fingerprint
//	acquire:        claim's five, $6 fence read, $7 state read
//	complete, hold: $1 key, $2 token, $3 result
//	release:        $1 key, $2 token
//	extend:         $1 key, $2 token, $3 lease µs
//	markStarted:    $1 key, $2 token
//	get:            $1 key
//	purge:          $1 grace µs, $2 batch
type queries struct {
	// claim (PostgreSQL only) inserts a new record or, when one exists,
	// returns it: one round trip for a first claim and for a replay.
	claim query
	// read returns the clock and the record, if any (MySQL, SQLite).
	read query
	// insert creates a new record unless one exists (MySQL, SQLite).
	insert query
	// acquire re-claims an existing record, if it is still the version
	// read (fence and state) and still acquirable by the store's clock now.
	// It keeps the started mark on a takeover (in progress, not expired)
	// and clears it otherwise, and returns the new fence and the mark.
	acquire     query
	complete    query
	completeTx  query // complete inside the caller's transaction
	hold        query // complete, and mark the record held
	release     query
	extend      query
	markStarted query
	get         query
	purge       query
}

// pinExpr is the PostgreSQL expression that sets synchronous_commit to
// level until the end of the statement's transaction (set_config with
// is_local true: SET LOCAL). Each of the Store's PostgreSQL writes is an
// implicit transaction of one statement; the commit at its end reads the
// setting, so the expression makes that commit wait as level says, whatever
// the session's level (a DSN's options=-c synchronous_commit=off, a role's
// ALTER ROLE … SET). It sits in a CTE that the write joins (FROM c, FROM
// p): set_config is volatile, so the CTE is materialized and evaluated
// before the first row is written; a statement that writes no row commits
// nothing to wait for. level is one of pinnedLevels, checked by
// Config.validate, so it is written as a literal.
func pinExpr(level string) string {
	return "set_config('synchronous_commit', '" + level + "', true)"
}

// recordCols are the columns read by claim and read, in this order:
// state, fingerprint, fence, lease_until, expires_at, result (only for a
// replay: completed, same fingerprint, not expired), now.

func newQueries(d Dialect, table, level string) queries {
	b := func(text string) query {
		return build(d, table, strings.ReplaceAll(text, "{{pin}}", pinExpr(level)))
	}
	var q queries
	switch d {
	case Postgres:
		// The clock is read once, before any wait, in c; the last column
		// reads it again after the insert, so that Begin can tell a lease
		// that waited (behind another caller's uncommitted insert of the
		// same key) and renew it.
		//
		// ON CONFLICT DO NOTHING takes no row lock and writes nothing when
		// the key exists; the UNION's second branch then reads the record in
		// the same statement. If the conflicting row was committed after
		// this statement's snapshot (a racing first claim), neither branch
		// returns a row and Begin tries again.
		q.claim = b(`WITH c AS (SELECT {{now}} AS now, {{pin}} AS pin),
ins AS (
	INSERT INTO {{table}} (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at)
	SELECT $1, 1, $2, $3, c.now, NULL, c.now, c.now + $4, c.now + $5 FROM c
	ON CONFLICT (key_hash) DO NOTHING
	RETURNING fence
)
SELECT true, 0::smallint, NULL::bytea, ins.fence, 0::bigint, 0::bigint, NULL::bytea, c.now, {{now}} FROM ins, c
UNION ALL
SELECT false, t.state, t.fingerprint, t.fence, t.lease_until, t.expires_at,
	CASE WHEN t.state = 2 AND t.fingerprint = $2 AND t.expires_at > c.now THEN t.result END, c.now, c.now
FROM {{table}} t, c
WHERE t.key_hash = $1 AND NOT EXISTS (SELECT 1 FROM ins)`)
		// PostgreSQL computes the new row before it waits for the row lock
		// (behind a CompleteTx transaction, say), so lease_until is
		// c.now + lease even after a long wait. RETURNING reads the clock
		// again after the lock was granted; Begin renews a lease that the
		// wait consumed before it reports Acquired.
		q.acquire = b(`WITH c AS (SELECT {{now}} AS now, {{pin}} AS pin)
UPDATE {{table}} t SET state = 1, fingerprint = $2, owner = $3, fence = GREATEST(t.fence + 1, c.now),
	result = NULL, held = false, created_at = c.now, lease_until = c.now + $4, expires_at = c.now + $5,
	started = (t.state = 1 AND t.expires_at > c.now AND t.started)
FROM c
WHERE t.key_hash = $1 AND t.fence = $6 AND t.state = $7
	AND (t.state = 3 OR t.expires_at <= c.now OR (t.state = 1 AND t.lease_until <= c.now AND t.fingerprint = $2))
RETURNING t.fence, t.started, c.now, {{now}}`)
		// The result is kept when the record is already completed: a
		// repeated Complete by the owner succeeds and never changes what
		// replays have already returned.
		//
		// CompleteTx runs completeTx, the same UPDATE without the pin: it
		// is the caller's transaction, whose level applies.
		q.complete = b(`WITH p AS (SELECT {{pin}} AS pin)
UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, state = 2, lease_until = 0
FROM p WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		q.completeTx = b(`UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, state = 2, lease_until = 0
WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		// Hold is Complete that also sets held; on a completed record
		// (Complete or Hold sent again) it changes neither.
		q.hold = b(`WITH p AS (SELECT {{pin}} AS pin)
UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, held = (state = 2 AND held) OR state = 1, state = 2, lease_until = 0
FROM p WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		q.release = b(`WITH p AS (SELECT {{pin}} AS pin)
UPDATE {{table}} SET state = 3, lease_until = 0, started = false FROM p WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		q.markStarted = b(`WITH p AS (SELECT {{pin}} AS pin)
UPDATE {{table}} SET started = true FROM p WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		q.extend = b(`WITH c AS (SELECT {{now}} AS now, {{pin}} AS pin)
UPDATE {{table}} t SET lease_until = c.now + $3, expires_at = GREATEST(t.expires_at, c.now + $3)
FROM c WHERE t.key_hash = $1 AND t.owner = $2 AND t.state = 1`)
		// The expiry is checked again by the DELETE itself: a record
		// re-acquired between the sub-select and the delete has a new
		// expires_at and survives (READ COMMITTED re-evaluates the WHERE
		// on the row's newest version).
		q.purge = b(`WITH c AS (SELECT {{now}} - $1 AS cutoff)
DELETE FROM {{table}} t USING c
WHERE t.key_hash IN (SELECT key_hash FROM {{table}}, c WHERE expires_at <= c.cutoff ORDER BY expires_at LIMIT $2)
	AND t.expires_at <= c.cutoff`)

	case MySQL:
		q.read = b(`SELECT t.state, t.fingerprint, t.fence, t.lease_until, t.expires_at,
	CASE WHEN t.state = 2 AND t.fingerprint = $2 AND t.expires_at > c.now THEN t.result END, c.now
FROM (SELECT {{now}} AS now) c LEFT JOIN {{table}} t ON t.key_hash = $1`)
		// LAST_INSERT_ID(expr) hands the new fence back in the OK packet
		// (Result.LastInsertId), so no second statement reads it. IGNORE
		// only covers the duplicate key: every value has a fixed size.
		q.insert = b(`INSERT IGNORE INTO {{table}} (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at)
VALUES ($1, 1, $2, $3, LAST_INSERT_ID({{now}}), NULL, {{now}}, {{now}} + $4, {{now}} + $5)`)
		// MySQL evaluates SET assignments left to right, each seeing the
		// ones before it: fence is computed from the old fence; started
		// from the new fence and the old state, expiry and mark; state is
		// assigned last. LAST_INSERT_ID carries fence*2 + started back in
		// the OK packet (fences are unix microseconds, far below 2^62).
		q.acquire = b(`UPDATE {{table}} SET result = NULL, held = 0, fingerprint = $2, owner = $3,
	fence = GREATEST(fence + 1, {{now}}),
	started = LAST_INSERT_ID(fence * 2 + (state = 1 AND expires_at > {{now}} AND started = 1)) % 2,
	created_at = {{now}}, lease_until = {{now}} + $4, expires_at = {{now}} + $5, state = 1, rev = rev + 1
WHERE key_hash = $1 AND fence = $6 AND state = $7
	AND (state = 3 OR expires_at <= {{now}} OR (state = 1 AND lease_until <= {{now}} AND fingerprint = $2))`)
		// result is assigned before state, so its CASE sees the old state.
		q.complete = b(`UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, state = 2, lease_until = 0, rev = rev + 1
WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		q.hold = b(`UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, held = CASE WHEN state = 2 THEN held ELSE 1 END,
	state = 2, lease_until = 0, rev = rev + 1
WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		q.release = b(`UPDATE {{table}} SET state = 3, lease_until = 0, started = 0, rev = rev + 1 WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		q.markStarted = b(`UPDATE {{table}} SET started = 1, rev = rev + 1 WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		// lease_until is assigned first and expires_at reads it: {{now}}
		// reads SYSDATE, which moves between two evaluations, so computing
		// both from {{now}} left the record expiring microseconds before
		// its lease ended.
		q.extend = b(`UPDATE {{table}} SET lease_until = {{now}} + $3, expires_at = GREATEST(expires_at, lease_until), rev = rev + 1
WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		// A single-table DELETE with ORDER BY … LIMIT: its condition is
		// evaluated on the rows' current versions (a locking read), so a
		// record re-acquired meanwhile survives.
		q.purge = b(`DELETE FROM {{table}} WHERE expires_at <= {{now}} - $1 ORDER BY expires_at, key_hash LIMIT $2`)

	case SQLite:
		q.read = b(`SELECT t.state, t.fingerprint, t.fence, t.lease_until, t.expires_at,
	CASE WHEN t.state = 2 AND t.fingerprint = $2 AND t.expires_at > c.now THEN t.result END, c.now
FROM (SELECT {{now}} AS now) c LEFT JOIN {{table}} t ON t.key_hash = $1`)
		q.insert = b(`INSERT INTO {{table}} (key_hash, state, fingerprint, owner, fence, result, created_at, lease_until, expires_at)
VALUES ($1, 1, $2, $3, {{now}}, NULL, {{now}}, {{now}} + $4, {{now}} + $5)
ON CONFLICT (key_hash) DO NOTHING RETURNING fence`)
		q.acquire = b(`UPDATE {{table}} SET state = 1, fingerprint = $2, owner = $3, fence = max(fence + 1, {{now}}),
	result = NULL, held = 0, created_at = {{now}}, lease_until = {{now}} + $4, expires_at = {{now}} + $5,
	started = (state = 1 AND expires_at > {{now}} AND started = 1)
WHERE key_hash = $1 AND fence = $6 AND state = $7
	AND (state = 3 OR expires_at <= {{now}} OR (state = 1 AND lease_until <= {{now}} AND fingerprint = $2))
RETURNING fence, started`)
		q.complete = b(`UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, state = 2, lease_until = 0
WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		q.hold = b(`UPDATE {{table}} SET result = CASE WHEN state = 2 THEN result ELSE $3 END, held = CASE WHEN state = 2 THEN held ELSE 1 END,
	state = 2, lease_until = 0
WHERE key_hash = $1 AND owner = $2 AND state IN (1, 2)`)
		q.release = b(`UPDATE {{table}} SET state = 3, lease_until = 0, started = 0 WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		q.markStarted = b(`UPDATE {{table}} SET started = 1 WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		q.extend = b(`UPDATE {{table}} SET lease_until = {{now}} + $3, expires_at = max(expires_at, {{now}} + $3)
WHERE key_hash = $1 AND owner = $2 AND state = 1`)
		q.purge = b(`DELETE FROM {{table}}
WHERE key_hash IN (SELECT key_hash FROM {{table}} WHERE expires_at <= {{now}} - $1 ORDER BY expires_at LIMIT $2)
	AND expires_at <= {{now}} - $1`)
	}
	if d != Postgres {
		q.completeTx = q.complete
	}
	q.get = b(`SELECT ` + stateCol[d] + `, fingerprint, fence, result, created_at, lease_until, expires_at, started FROM {{table}} WHERE key_hash = $1`)
	return q
}

// SQLiteDSN returns the modernc.org/sqlite data source name this package
// is tested with, for a database file at path (which must not contain '?'):
//
//		file:PATH?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(FULL)&_txlock=immediate
//
//	  - journal_mode(WAL): readers (replays) never wait for the writer.
//	  - busy_timeout(10000): a writer waits up to 10 s for the write lock
//	    instead of failing at once with SQLITE_BUSY; SQLite has one writer
//	    at a time, and each of Begin's writes is one short statement.
//	  - synchronous(FULL): a commit is on disk before it returns, so a
//	    completed record survives a power cut (NORMAL survives only a crash
//	    of the process).
//	  - _txlock=immediate: *sql.DB transactions start with BEGIN IMMEDIATE,
//	    taking the write lock first. A deferred transaction that reads and
//	    then writes (the business change before CompleteTx) could otherwise
//	    fail with SQLITE_BUSY without waiting.
//
// Leave the pool's MaxOpenConns above 1: Do's heartbeat and other callers'
// replays need a connection while a CompleteTx transaction holds one.
//
// The first connection to a new file switches it to WAL, and SQLite answers
// connections that open the file during that switch with SQLITE_BUSY at
// once (busy_timeout does not cover it). Ping a new pool (or Migrate) once
// before several goroutines use it.
func SQLiteDSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(FULL)&_txlock=immediate"
}
