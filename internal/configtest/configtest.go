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
	"time"

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

// OperatorStore is what WantStoreArgs calls: the operator methods and
// Extend that the stores (memstore, sqlstore, redisstore) share.
type OperatorStore interface {
	Purge(ctx context.Context, grace time.Duration, batch int) (int64, error)
	List(ctx context.Context, state idem.State, startedOnly bool, limit int) ([]idem.Record, error)
	Extend(ctx context.Context, owner idem.Owner, lease time.Duration) error
}

// WantStoreArgs checks that s, a store of package pkg, rejects the
// arguments of Purge, List and Extend that can never work before any I/O,
// each with a *idem.ConfigError naming the argument.
func WantStoreArgs(tb testing.TB, s OperatorStore, pkg string) {
	tb.Helper()
	ctx := context.Background()
	_, err := s.Purge(ctx, time.Hour, 0)
	Want(tb, err, pkg, "batch")
	_, err = s.Purge(ctx, -time.Hour, 10)
	Want(tb, err, pkg, "grace")
	_, err = s.List(ctx, 0, false, 0)
	Want(tb, err, pkg, "limit")
	_, err = s.List(ctx, idem.State(200), false, 10)
	Want(tb, err, pkg, "state")
	Want(tb, s.Extend(ctx, idem.Owner{}, 0), pkg, "lease")
}
