package testenv

import (
	"database/sql"
	"net/url"
	"testing"

	"github.com/idemkit/idem/idemtest/faultproxy"
)

// The fault proxy lives in the exported package idemtest/faultproxy, so that
// idemtest.RunFaults (and third-party stores) can use it; these names keep
// the tests of this module short.

// FaultProxy is a TCP proxy on loopback in front of a real server: see
// faultproxy.Proxy.
type FaultProxy = faultproxy.Proxy

// Fault is what a FaultProxy does to the traffic it carries.
type Fault = faultproxy.Fault

// Faults of a FaultProxy: see the faultproxy package.
const (
	Pass        = faultproxy.Pass
	BlackHole   = faultproxy.BlackHole
	DropReplies = faultproxy.DropReplies
	Refuse      = faultproxy.Refuse
)

// NewFaultProxy starts a proxy on a free loopback port that forwards to
// target (host:port). It is closed when the test ends.
func NewFaultProxy(tb testing.TB, target string) *FaultProxy {
	tb.Helper()
	return faultproxy.New(tb, target)
}

// Redirect returns dsn with its host and port replaced by addr: see
// faultproxy.Redirect.
func Redirect(dsn, addr string) string { return faultproxy.Redirect(dsn, addr) }

// PostgresViaProxy opens a second pool on the PostgreSQL database of dsn (a
// postgres:// URL, as PostgresDB returns) through a new FaultProxy, so that
// a test can cut that pool's link while it inspects the database directly.
// The pool is closed when the test ends.
func PostgresViaProxy(tb testing.TB, dsn string) (*sql.DB, *FaultProxy) {
	tb.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("PostgresViaProxy: %v", err)
	}
	p := NewFaultProxy(tb, u.Host)
	db, err := sql.Open("pgx", Redirect(dsn, p.Addr()))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db, p
}
