// Package sqldialect is the one place idem's SQL packages (sqlstore,
// onetime/sqltoken, fsm, optlock, inbox and its watermark) learn which
// database they talk to: the Dialect type, its bind-parameter spelling, the
// names it is known by and the check that a table or column name is a plain
// identifier before it is written into a statement.
//
// The exported packages re-export the type under their own names
// (type Dialect = sqldialect.Dialect, const Postgres = sqldialect.Postgres),
// so sqlstore.Postgres, sqltoken.Postgres, fsm.Postgres, optlock.Postgres
// and inbox.Postgres are one value of one type, and a program that uses
// several of them names its database once.
//
// # Identifiers
//
// Names cannot be bind parameters, so they are interpolated into the SQL
// text. CheckIdent accepts only [A-Za-z_][A-Za-z0-9_]* of at most 63 bytes
// (PostgreSQL's limit; MySQL allows 64, SQLite more), optionally qualified by
// one schema. Nothing a caller passes as a name can therefore change the
// shape of a statement. Names are written unquoted and follow the
// database's usual case folding.
//
// # Rows affected
//
// The packages that decide by "rows affected" (a conditional UPDATE, an
// insert-unless-present) rely on these facts, collected here once:
//
//   - PostgreSQL and SQLite count the rows a statement matched and wrote.
//   - MySQL and MariaDB count changed rows, not matched rows, unless the DSN
//     sets clientFoundRows=true. An UPDATE that always changes a column (a
//     version or status bump) reports the same count either way; one that
//     may write a row's current values again does not.
//   - INSERT IGNORE reports 0 rows for a duplicate key on MySQL, with or
//     without clientFoundRows; ON CONFLICT DO NOTHING reports 0 on
//     PostgreSQL and SQLite.
//   - MySQL has no UPDATE … RETURNING: LAST_INSERT_ID(expr) hands a new
//     value back in the OK packet of the same statement instead.
package sqldialect
