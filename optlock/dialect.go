package optlock

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqldialect"
)

// Dialect selects the SQL spelling of a database (its placeholders). It is
// the same type as fsm.Dialect, inbox.Dialect and sqlstore.Dialect, so
// optlock.Postgres and fsm.Postgres are one value.
type Dialect = sqldialect.Dialect

// The supported dialects.
const (
	Postgres Dialect = sqldialect.Postgres // PostgreSQL (pgx stdlib, lib/pq): $1 placeholders
	MySQL    Dialect = sqldialect.MySQL    // MySQL and MariaDB (go-sql-driver/mysql): ? placeholders
	SQLite   Dialect = sqldialect.SQLite   // SQLite (modernc.org/sqlite, mattn/go-sqlite3): ? placeholders
)

// checkIdent rejects a name that is not a plain SQL identifier (see
// sqldialect.CheckIdent); what says which name it is, for the error.
func checkIdent(what, name string, qualified bool) error {
	if err := sqldialect.CheckIdent(name, qualified); err != nil {
		return configError(what, err.Error())
	}
	return nil
}

// configError is the *idem.ConfigError of package optlock.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "optlock", Field: field, Reason: reason}
}
