// Package configtest checks configuration errors in tests: that a value a
// package rejects is reported as the library's one *idem.ConfigError,
// naming the option. It needs only the standard library and the root
// package, so that the tests of every module may use it.
package configtest

import (
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
