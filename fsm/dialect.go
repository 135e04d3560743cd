package fsm

import (
	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqldialect"
)

// Dialect selects the SQL spelling of a database: placeholders and the way the
// new version comes back from the UPDATE. It is the same type as
// optlock.Dialect, inbox.Dialect and sqlstore.Dialect, so fsm.Postgres can be
// passed wherever one of those is asked for.
type Dialect = sqldialect.Dialect

// The supported dialects.
const (
	Postgres Dialect = sqldialect.Postgres // PostgreSQL (pgx stdlib, lib/pq): $1 placeholders, UPDATE … RETURNING
	MySQL    Dialect = sqldialect.MySQL    // MySQL and MariaDB (go-sql-driver/mysql): ? placeholders, LAST_INSERT_ID(expr)
	SQLite   Dialect = sqldialect.SQLite   // SQLite ≥ 3.35 (modernc.org/sqlite, mattn): ? placeholders, UPDATE … RETURNING
)

// checkIdent rejects a name that is not a plain SQL identifier (see
// sqldialect.CheckIdent): names are written into the SQL unquoted, so nothing
// a caller passes as a name can change the statement. what says which name
// it is, for the error.
func checkIdent(what, name string, qualified bool) error {
	if err := sqldialect.CheckIdent(name, qualified); err != nil {
		return configError(what, err.Error())
	}
	return nil
}

// configError is the *idem.ConfigError of package fsm.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "fsm", Field: field, Reason: reason}
}
