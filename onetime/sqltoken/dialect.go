package sqltoken

import (
	"fmt"
	"strings"

	"github.com/idemkit/idem/internal/sqldialect"
)

// Dialect selects the SQL spoken by the database. It is the type sqlstore,
// fsm, optlock and inbox use too: sqltoken.Postgres and sqlstore.Postgres
// are one value. String returns "postgres", "mysql" or "sqlite".
type Dialect = sqldialect.Dialect

// Supported dialects.
const (
	// Postgres: PostgreSQL through pgx's database/sql driver ("pgx").
	Postgres Dialect = sqldialect.Postgres
	// MySQL: MySQL or MariaDB through go-sql-driver/mysql.
	MySQL Dialect = sqldialect.MySQL
	// SQLite: modernc.org/sqlite (driver "sqlite"). Open it with WAL and a
	// busy timeout: file:PATH?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000).
	SQLite Dialect = sqldialect.SQLite
)

// maxTable is the longest Config.Table accepted, in bytes: stricter than
// sqldialect.MaxIdentLen so that the derived names Table+"_migrations" and
// Table+"_expires_at" still fit PostgreSQL's 63-byte limit.
const maxTable = 48

// checkTable reports whether table is a plain identifier of at most
// maxTable bytes.
func checkTable(table string) bool {
	return len(table) <= maxTable && sqldialect.CheckIdent(table, false) == nil
}

// nowExpr is the database clock in unix microseconds. PostgreSQL's
// clock_timestamp() is the wall clock at the call (now() would be the
// transaction's start); MySQL's UTC_TIMESTAMP(6) avoids any session time
// zone; SQLite's unixepoch('subsec') is milliseconds, scaled.
func nowExpr(d Dialect) string {
	switch d {
	case Postgres:
		return "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT"
	case MySQL:
		return "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))"
	default:
		return "CAST(unixepoch('subsec') * 1000000 AS INTEGER)"
	}
}

// queries are the statements of one table in one dialect, built once.
type queries struct {
	insert, consume, classify, restore, purge string
	// consumeArgs orders (token, scope, useID, fence) for consume's
	// placeholders, which MySQL and SQLite's "?" cannot repeat.
	consumeArgs func(tok, scope, id []byte, fence int64) []any
}

func buildQueries(d Dialect, table string) queries {
	now := nowExpr(d)
	var q queries
	// rebind turns "?" into $1, $2… for PostgreSQL.
	rebind := func(s string) string {
		if d != Postgres {
			return s
		}
		var b strings.Builder
		n := 0
		for _, r := range s {
			if r == '?' {
				n++
				fmt.Fprintf(&b, "$%d", n)
				continue
			}
			b.WriteRune(r)
		}
		return b.String()
	}
	q.insert = rebind(`INSERT INTO ` + table + ` (token_hash, scope_hash, created_at, expires_at)
		VALUES (?, ?, ` + now + `, ` + now + ` + ?)`)
	if d == Postgres {
		q.consume = `UPDATE ` + table + ` SET used_by = $3, used_fence = $4, used_at = ` + now + `
			WHERE token_hash = $1 AND scope_hash = $2 AND expires_at > ` + now + `
			AND (used_by IS NULL OR (used_by = $3 AND used_fence <= $4))`
		q.consumeArgs = func(tok, scope, id []byte, fence int64) []any { return []any{tok, scope, id, fence} }
	} else {
		q.consume = `UPDATE ` + table + ` SET used_by = ?, used_fence = ?, used_at = ` + now + `
			WHERE token_hash = ? AND scope_hash = ? AND expires_at > ` + now + `
			AND (used_by IS NULL OR (used_by = ? AND used_fence <= ?))`
		q.consumeArgs = func(tok, scope, id []byte, fence int64) []any {
			return []any{id, fence, tok, scope, id, fence}
		}
	}
	q.classify = rebind(`SELECT scope_hash, used_by, used_fence, CASE WHEN expires_at > ` + now + ` THEN 0 ELSE 1 END
		FROM ` + table + ` WHERE token_hash = ?`)
	q.restore = rebind(`UPDATE ` + table + ` SET used_by = NULL, used_fence = NULL, used_at = NULL
		WHERE token_hash = ? AND used_by = ? AND used_fence = ?`)
	switch d {
	case MySQL:
		q.purge = `DELETE FROM ` + table + ` WHERE expires_at <= ` + now + ` - ? ORDER BY expires_at LIMIT ?`
	default:
		q.purge = rebind(`DELETE FROM ` + table + ` WHERE token_hash IN (
			SELECT token_hash FROM ` + table + ` WHERE expires_at <= ` + now + ` - ? LIMIT ?)`)
	}
	return q
}
