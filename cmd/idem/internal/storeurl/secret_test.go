package storeurl

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// closedPort returns a loopback port nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port
}

// Passwords given as query parameters never reach an error: not the
// parse, not the open, not the failed connection (real I/O to a closed
// port), not the DSN's String.
func TestQueryPasswordsNeverInErrors(t *testing.T) {
	t.Parallel()
	const secret = "Qu3ryS3cret"
	port := closedPort(t)
	for _, dsn := range []string{
		fmt.Sprintf("postgres://app@127.0.0.1:%d/pay?password=%s&connect_timeout=2&sslmode=disable", port, secret),
		fmt.Sprintf("postgres://app:%s@127.0.0.1:%d/pay?sslpassword=%s&connect_timeout=2&sslmode=disable", secret, port, secret),
		fmt.Sprintf("mysql://root@127.0.0.1:%d/test?password=%s", port, secret),
		fmt.Sprintf("redis://app:%s@127.0.0.1:%d/0?dial_timeout=200ms", secret, port),
		fmt.Sprintf("rediss://:%s@127.0.0.1:%d/3", secret, port),
	} {
		d, err := Parse(dsn)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if strings.Contains(d.String(), secret) {
			t.Errorf("String() = %q leaks the password", d.String())
		}
		h, err := Open(d)
		if err != nil {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("Open error leaks the password: %v", err)
			}
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = h.Prepare(ctx)
		cancel()
		if err == nil {
			t.Fatalf("Prepare against a closed port succeeded")
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("Prepare error leaks the password: %v", err)
		}
		if werr := h.Wrap(fmt.Errorf("driver said: password %s rejected", secret)); strings.Contains(werr.Error(), secret) {
			t.Errorf("Wrap leaks the password: %v", werr)
		}
		h.Close()
	}
}
