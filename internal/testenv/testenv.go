package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"
)

// Service describes one external dependency of the tests.
type Service struct {
	Name    string // human name, e.g. "PostgreSQL"
	Env     string // environment variable that overrides the address
	Default string // loopback default
}

var (
	Postgres = Service{"PostgreSQL", "IDEM_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"}
	MySQL    = Service{"MariaDB/MySQL", "IDEM_TEST_MYSQL", "root@tcp(127.0.0.1:3306)/test"}
	Redis    = Service{"Redis", "IDEM_TEST_REDIS", "redis://127.0.0.1:6379/0"}
	NATS     = Service{"NATS JetStream", "IDEM_TEST_NATS", "nats://127.0.0.1:4222"}
	AMQP     = Service{"RabbitMQ", "IDEM_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672/"}
)

// Required reports whether IDEM_REQUIRE_SERVICES=1 is set: absent services fail
// the test instead of skipping it.
func Required() bool { return os.Getenv("IDEM_REQUIRE_SERVICES") == "1" }

// DSN returns the service's address from its variable or the default.
func (s Service) DSN() string {
	if v := os.Getenv(s.Env); v != "" {
		return v
	}
	return s.Default
}

// Need returns the service's DSN after checking that its TCP port answers. It
// skips the test (or fails it under IDEM_REQUIRE_SERVICES=1) when it does not.
func (s Service) Need(tb testing.TB) string {
	tb.Helper()
	dsn := s.DSN()
	addr, err := hostPort(dsn)
	if err == nil {
		var c net.Conn
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		if err == nil {
			c.Close()
			return dsn
		}
	}
	Unavailable(tb, s.Name+" ("+s.Env+")", err)
	return ""
}

// Unavailable skips or fails tb because what names is not reachable.
func Unavailable(tb testing.TB, what string, err error) {
	tb.Helper()
	if Required() {
		tb.Fatalf("%s is required (IDEM_REQUIRE_SERVICES=1) but not reachable: %v", what, err)
	}
	tb.Skipf("%s not reachable, skipping (set IDEM_REQUIRE_SERVICES=1 to fail instead): %v", what, err)
}

// hostPort extracts host:port from the DSN forms above.
func hostPort(dsn string) (string, error) {
	if i := strings.Index(dsn, "@tcp("); i >= 0 { // go-sql-driver/mysql form
		rest := dsn[i+len("@tcp("):]
		if j := strings.IndexByte(rest, ')'); j >= 0 {
			return rest[:j], nil
		}
	}
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("cannot parse service address: %w", err)
	}
	if u.Port() == "" {
		return "", fmt.Errorf("service address %q has no port", u.Redacted())
	}
	return u.Host, nil
}

// Name returns a fresh identifier safe for table names, schemas and key
// prefixes: prefix + "_" + 12 random hex digits, so parallel tests and reruns
// never see each other's data.
func Name(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return prefix + "_" + hex.EncodeToString(b[:])
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
