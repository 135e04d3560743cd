package fsm

import (
	"fmt"
	"strconv"
	"strings"
)

// Dialect selects the SQL spelling of a database: placeholders and the way the
// new version comes back from the UPDATE. It is a string so that the dialects of
// sibling packages (optlock, sqlstore) convert with a plain type conversion.
type Dialect string

// The supported dialects.
const (
	Postgres Dialect = "postgres" // PostgreSQL (pgx stdlib, lib/pq): $1 placeholders, UPDATE … RETURNING
	MySQL    Dialect = "mysql"    // MySQL and MariaDB (go-sql-driver/mysql): ? placeholders, LAST_INSERT_ID(expr)
	SQLite   Dialect = "sqlite"   // SQLite ≥ 3.35 (modernc.org/sqlite, mattn): ? placeholders, UPDATE … RETURNING
)

func (d Dialect) validate() error {
	switch d {
	case Postgres, MySQL, SQLite:
		return nil
	case "":
		return fmt.Errorf("fsm: dialect is required (fsm.Postgres, fsm.MySQL or fsm.SQLite)")
	default:
		return fmt.Errorf("fsm: unknown dialect %q (want fsm.Postgres, fsm.MySQL or fsm.SQLite)", string(d))
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
			return fmt.Errorf("fsm: %s %q: at most one dot (schema.table)", what, name)
		}
	}
	for _, p := range parts {
		if p == "" {
			return fmt.Errorf("fsm: %s %q: empty identifier", what, name)
		}
		if len(p) > maxIdentLen {
			return fmt.Errorf("fsm: %s %q: identifier longer than %d bytes", what, name, maxIdentLen)
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
			digit := '0' <= c && c <= '9'
			if !letter && !(digit && i > 0) {
				return fmt.Errorf("fsm: %s %q: not a plain identifier (letters, digits and _, not starting with a digit)", what, name)
			}
		}
	}
	return nil
}
