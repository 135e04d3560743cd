// Package configtest checks configuration errors in tests: that a value a
// package rejects is reported as the library's one *idem.ConfigError,
// naming the option. It needs only the standard library and the root
// package, so that the tests of every module may use it.
package configtest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"

	"github.com/idemkit/idem"
)

// Want fails tb unless err is, or wraps, an *idem.ConfigError of package pkg
// ("" for the root package) naming field, with a reason, in the one text
// format "<pkg>: invalid <field>: <reason>".
func Want(tb testing.TB, err error, pkg, field string) {
	tb.Helper()
	var ce *idem.ConfigError
	if !errors.As(err, &ce) {
		tb.Errorf("want a *idem.ConfigError of %s for %s, got %T: %v", pkg, field, err, err)
		return
	}
	if ce.Package != pkg || ce.Field != field || ce.Reason == "" {
		tb.Errorf("want ConfigError{Package: %q, Field: %q, Reason: …}, got %#v", pkg, field, *ce)
		return
	}
	name := pkg
	if name == "" {
		name = "idem"
	}
	if want := name + ": invalid " + field + ": " + ce.Reason; ce.Error() != want {
		tb.Errorf("ConfigError text %q, want %q", ce.Error(), want)
	}
}

// NoDB returns a *sql.DB that never connects, for constructors that take a
// database and do no I/O: any use of it fails.
func NoDB(tb testing.TB) *sql.DB {
	db := sql.OpenDB(noConnector{})
	tb.Cleanup(func() { db.Close() })
	return db
}

type noConnector struct{}

func (noConnector) Connect(context.Context) (driver.Conn, error) {
	return nil, errors.New("configtest: NoDB never connects")
}
func (noConnector) Driver() driver.Driver { return nil }
