package optlock

import (
	"fmt"
	"strconv"
	"strings"
)

// Dialect selects the SQL spelling of a database (its placeholders). It is a
// string so that the dialects of sibling packages (fsm, sqlstore) convert with
// a plain type conversion: optlock.Dialect(fsm.Postgres).
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres" // PostgreSQL (pgx stdlib, lib/pq): $1 placeholders
	MySQL    Dialect = "mysql"    // MySQL and MariaDB (go-sql-driver/mysql): ? placeholders
	SQLite   Dialect = "sqlite"   // SQLite (modernc.org/sqlite, mattn/go-sqlite3): ? placeholders
)

func (d Dialect) validate() error {
	switch d {
	case Postgres, MySQL, SQLite:
		return nil
	case "":
		return fmt.Errorf("optlock: dialect is required (optlock.Postgres, optlock.MySQL or optlock.SQLite)")
	default:
		return fmt.Errorf("optlock: unknown dialect %q (want optlock.Postgres, optlock.MySQL or optlock.SQLite)", string(d))
	}
}

// placeholder returns the n-th (1-based) bind parameter.
func (d Dialect) placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// maxIdentLen is PostgreSQL's limit (63 bytes); MySQL allows 64, SQLite more.
const maxIdentLen = 63

// checkIdent reports whether name is a plain SQL identifier: a letter or
// underscore, then letters, digits or underscores, at most 63 bytes. When
// qualified is true one dot is allowed (schema.table). Names are written into
// the SQL unquoted, so they follow the database's usual case folding, and
// nothing a caller passes as a name can change the statement.
func checkIdent(what, name string, qualified bool) error {
	parts := []string{name}
	if qualified {
		parts = strings.Split(name, ".")
		if len(parts) > 2 {
			return fmt.Errorf("optlock: %s %q: at most one dot (schema.table)", what, name)
		}
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("optlock: %s %q: empty identifier", what, name)
		}
		if len(p) > maxIdentLen {
			return fmt.Errorf("optlock: %s %q: identifier longer than %d bytes", what, name, maxIdentLen)
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
			digit := '0' <= c && c <= '9'
			if !letter && !(digit && i > 0) {
				return fmt.Errorf("optlock: %s %q: not a plain identifier (letters, digits and _, not starting with a digit)", what, name)
			}
		}
	}
	return nil
}
