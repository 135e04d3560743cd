// Package sqlerr classifies database errors for the packages that run SQL
// (sqlstore, inbox, inbox/watermark, the inbox adapters): is the server out
// of reach, or did a transaction lose a race that a retry can win?
//
// It knows PostgreSQL (pgx; any error with a SQLState method), MySQL and
// MariaDB (go-sql-driver/mysql, recognised by shape so that importing this
// package never registers a MySQL driver) and SQLite (modernc.org/sqlite).
//
// # Context errors
//
// context.Canceled and context.DeadlineExceeded are never transient here:
// whether the caller's own context ended is the caller's question, answered
// by ctx.Err(), not by the shape of the error.
package sqlerr

import (
	"context"
	"database/sql/driver"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"syscall"
)

// IsTransient reports whether err is a failure that a later attempt may not
// hit: IsConnection, IsRetryable or IsCancelled.
func IsTransient(err error) bool { return IsConnection(err) || IsRetryable(err) || IsCancelled(err) }

// IsDriverTransient is IsTransient judged only by what a driver or the
// network produces: an io.EOF or io.ErrUnexpectedEOF alone does not count,
// since every decoder returns them for a short input (encoding/json on an
// empty or truncated body). Use it for errors that may come from code
// other than the driver, such as a message handler's.
func IsDriverTransient(err error) bool {
	return isConnection(err, false) || IsRetryable(err) || IsCancelled(err)
}

// IsCancelled reports whether the server cancelled the statement while it
// ran or waited: PostgreSQL's query_canceled (57014: statement_timeout,
// pg_cancel_backend), MySQL and MariaDB's KILL QUERY (1317), MariaDB's
// max_statement_time (1969) and MySQL's max_execution_time (3024). A lock
// held by a migration looks like this under a statement timeout: the
// statement says nothing about the data it was given.
func IsCancelled(err error) bool {
	if err == nil {
		return false
	}
	if SQLState(err) == "57014" {
		return true
	}
	if n, ok := MySQLNumber(err); ok {
		switch n {
		case 1317, // ER_QUERY_INTERRUPTED
			1969, // ER_STATEMENT_TIMEOUT (MariaDB)
			3024: // ER_QUERY_TIMEOUT (MySQL)
			return true
		}
	}
	return false
}

// IsRetryable reports whether err means that the transaction lost a race and
// running it again may succeed: a serialization failure, a deadlock, a lock
// wait timeout, or SQLite's busy/locked.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	switch SQLState(err) {
	case "40001", // serialization_failure
		"40P01", // deadlock_detected
		"55P03": // lock_not_available
		return true
	}
	if n, ok := MySQLNumber(err); ok {
		switch n {
		case 1205, // ER_LOCK_WAIT_TIMEOUT
			1213: // ER_LOCK_DEADLOCK
			return true
		}
	}
	var lite interface{ Code() int } // *sqlite.Error (modernc)
	if errors.As(err, &lite) {
		switch lite.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return false
}

// IsConnection reports whether err means that the server could not be
// reached or the connection broke: refused, reset, timed out, closed in the
// middle of a reply, or the server shutting down or out of connections.
// A caller's cancelled or expired context is not a connection failure.
func IsConnection(err error) bool { return isConnection(err, true) }

// isConnection is IsConnection; eof says whether an io.EOF or
// io.ErrUnexpectedEOF counts (pgx returns a bare io.ErrUnexpectedEOF when
// the server closes the connection in the middle of a reply).
func isConnection(err error, eof bool) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if eof && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) {
		return true
	}
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if st := SQLState(err); st != "" {
		switch {
		case strings.HasPrefix(st, "08"): // connection_exception
			return true
		case st == "57P01", st == "57P02", st == "57P03": // admin/crash shutdown, cannot connect now
			return true
		case st == "53300": // too_many_connections
			return true
		}
	}
	if n, ok := MySQLNumber(err); ok {
		switch n {
		case 1040, // ER_CON_COUNT_ERROR
			1053,                   // ER_SERVER_SHUTDOWN
			2002, 2003, 2006, 2013: // client: cannot connect, server gone, lost connection
			return true
		}
	}
	// go-sql-driver/mysql's ErrInvalidConn and pgconn's ErrConnClosed are
	// plain errors.New values: matched by message, without importing them.
	return hasLeafMessage(err, "invalid connection") || hasLeafMessage(err, "conn closed")
}

// SQLState returns the SQLSTATE of a PostgreSQL error in err's tree
// (*pgconn.PgError and lib/pq errors have a SQLState method), or "".
func SQLState(err error) string {
	var pg interface{ SQLState() string }
	if errors.As(err, &pg) {
		return pg.SQLState()
	}
	return ""
}

// MySQLNumber finds go-sql-driver's *mysql.MySQLError in err's tree and
// returns its Number. It looks at the type by shape so that this package
// does not import (and register) a MySQL driver for users of other
// databases.
func MySQLNumber(err error) (uint16, bool) {
	found := false
	var n uint16
	walk(err, func(e error) bool {
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() && v.Elem().Kind() == reflect.Struct && v.Elem().Type().Name() == "MySQLError" {
			if f := v.Elem().FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 {
				n, found = uint16(f.Uint()), true
				return true
			}
		}
		return false
	})
	return n, found
}

// hasLeafMessage reports whether an error without a cause in err's tree has
// exactly the message msg.
func hasLeafMessage(err error, msg string) bool {
	return walk(err, func(e error) bool {
		switch e.(type) {
		case interface{ Unwrap() error }, interface{ Unwrap() []error }:
			return false
		}
		return e.Error() == msg
	})
}

// walk calls fn on err and every error it wraps, depth first, until fn
// returns true; it reports whether one did.
func walk(err error, fn func(error) bool) bool {
	if err == nil {
		return false
	}
	if fn(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		return walk(u.Unwrap(), fn)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if walk(e, fn) {
				return true
			}
		}
	}
	return false
}
