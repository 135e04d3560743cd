package sqldialect

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// Dialect names the SQL database behind a store. The zero value is no
// dialect: Valid reports false and Check asks for one.
type Dialect uint8

// The supported dialects.
const (
	// Postgres is PostgreSQL through pgx's database/sql driver ("pgx"):
	// $n placeholders, UPDATE … RETURNING, clock_timestamp().
	Postgres Dialect = iota + 1
	// MySQL is MySQL 8 or MariaDB 10.5+ through go-sql-driver/mysql ("mysql"):
	// ? placeholders, LAST_INSERT_ID(expr) instead of RETURNING.
	MySQL
	// SQLite is SQLite ≥ 3.35 through modernc.org/sqlite ("sqlite"): ?
	// placeholders, UPDATE … RETURNING. Open it with WAL and a busy timeout,
	// e.g. file:PATH?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000).
	SQLite
)

// String returns the dialect's name: "postgres", "mysql", "sqlite", or
// "Dialect(n)" for a value that is none of them.
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	}
	return "Dialect(" + strconv.Itoa(int(d)) + ")"
}

// Valid reports whether d is one of the supported dialects.
func (d Dialect) Valid() bool { return d >= Postgres && d <= SQLite }

// Check returns nil for a supported dialect, and otherwise a
// *idem.ConfigError of package pkg for field (how the user of pkg passes
// the dialect: "dialect", "Config.Dialect") that tells what to pass, e.g.
// "fsm: invalid dialect: required (fsm.Postgres, fsm.MySQL or fsm.SQLite)".
func (d Dialect) Check(pkg, field string) error {
	if d.Valid() {
		return nil
	}
	want := pkg + ".Postgres, " + pkg + ".MySQL or " + pkg + ".SQLite"
	reason := "required (" + want + ")"
	if d != 0 {
		reason = fmt.Sprintf("unknown dialect %v (want %s)", d, want)
	}
	return &idem.ConfigError{Package: pkg, Field: field, Reason: reason}
}

// Placeholder returns the n-th (1-based) bind parameter marker: $n for
// PostgreSQL, ? elsewhere.
func (d Dialect) Placeholder(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// Parse is String's inverse: it maps "postgres", "mysql" or "sqlite" to its
// Dialect.
func Parse(name string) (Dialect, error) {
	for d := Postgres; d <= SQLite; d++ {
		if d.String() == name {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dialect %q (want postgres, mysql or sqlite)", name)
}

// ParseName is Parse made lenient for configuration and URLs: it ignores
// case and also accepts the usual aliases and database/sql driver names
// ("postgresql", "pgx", "mariadb", "sqlite3").
func ParseName(name string) (Dialect, error) {
	switch strings.ToLower(name) {
	case "postgres", "postgresql", "pgx":
		return Postgres, nil
	case "mysql", "mariadb":
		return MySQL, nil
	case "sqlite", "sqlite3":
		return SQLite, nil
	}
	return 0, fmt.Errorf("unknown dialect %q (want postgres, mysql or sqlite)", name)
}

// MaxIdentLen is the longest identifier CheckIdent accepts, in bytes:
// PostgreSQL's limit (MySQL allows 64, SQLite more).
const MaxIdentLen = 63

// ErrIdent is wrapped by every error CheckIdent returns.
var ErrIdent = errors.New("not a plain SQL identifier")

// identError says which name failed and why. Its text is `"name": reason`,
// so callers prefix what the name was for: fmt.Errorf("fsm: table %w", err).
type identError struct{ name, reason string }

func (e *identError) Error() string { return strconv.Quote(e.name) + ": " + e.reason }
func (e *identError) Unwrap() error { return ErrIdent }

// CheckIdent reports whether name is a plain SQL identifier: a letter or
// underscore, then letters, digits or underscores, at most MaxIdentLen bytes.
// When qualified is true one dot is allowed (schema.table), each side being
// such an identifier. The error wraps ErrIdent.
func CheckIdent(name string, qualified bool) error {
	parts := []string{name}
	if qualified {
		parts = strings.Split(name, ".")
		if len(parts) > 2 {
			return &identError{name, "at most one dot (schema.table)"}
		}
	}
	for _, p := range parts {
		if p == "" {
			return &identError{name, "empty identifier"}
		}
		if len(p) > MaxIdentLen {
			return &identError{name, "identifier longer than " + strconv.Itoa(MaxIdentLen) + " bytes"}
		}
		for i := 0; i < len(p); i++ {
			c := p[i]
			letter := c == '_' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
			digit := '0' <= c && c <= '9'
			if !letter && !(digit && i > 0) {
				return &identError{name, "not a plain identifier (letters, digits and _, not starting with a digit)"}
			}
		}
	}
	return nil
}
