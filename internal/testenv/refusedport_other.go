//go:build !linux

package testenv

import "testing"

// RefusedPort returns a port on 127.0.0.1 that refuses connections, for an
// address that must be unreachable. On Linux the port stays reserved until
// the test ends; here it is FreePort's, free a moment ago.
func RefusedPort(tb testing.TB) int {
	tb.Helper()
	return FreePort(tb)
}
