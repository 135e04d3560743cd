package testenv

import (
	"syscall"
	"testing"
)

// RefusedPort returns a port on 127.0.0.1 that refuses connections for the
// rest of the test, for an address that must be unreachable. FreePort's
// port is free a moment later, and a parallel test (or another process)
// that starts a server may be given it, which makes the "unreachable"
// address reachable. Here a socket stays bound to the port without
// listening (so a connect is refused) and without SO_REUSEADDR (so no one
// else can bind it) until the test ends.
func RefusedPort(tb testing.TB) int {
	tb.Helper()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("refused port: socket: %v", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		_ = syscall.Close(fd)
		tb.Fatalf("refused port: bind: %v", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		_ = syscall.Close(fd)
		tb.Fatalf("refused port: getsockname: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Close(fd) })
	return sa.(*syscall.SockaddrInet4).Port
}
