package main

// A store that stops answering (TCP open, nothing comes back) never hangs
// a request: every store call of the proxy has a deadline
// (--store-timeout), on PostgreSQL, MariaDB and Redis. SQLite is a file in
// the proxy's own process: there is no connection to black-hole.

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// storeHang is the hang detector of these tests: far longer than
// --store-timeout (1s) times the three store calls a request makes, far
// shorter than the 40 to 150 seconds a black-holed store cost before.
const storeHang = 30 * time.Second

func TestE2EStoreBlackHole(t *testing.T) {
	t.Parallel()
	stores := []struct {
		name string
		dsn  func(t *testing.T) (dsn, target string)
	}{
		{"Postgres", func(t *testing.T) (string, string) {
			_, dsn := testenv.PostgresDB(t)
			u, err := url.Parse(dsn)
			if err != nil {
				t.Fatal(err)
			}
			return dsn, u.Host
		}},
		{"MariaDB", func(t *testing.T) (string, string) {
			_, dsn := testenv.MySQLDB(t)
			i, j := strings.Index(dsn, "@tcp("), strings.IndexByte(dsn, ')')
			if i < 0 || j < i {
				t.Fatalf("MySQL DSN not of the form user@tcp(host:port)/db")
			}
			return dsn, dsn[i+len("@tcp(") : j]
		}},
		{"Redis", func(t *testing.T) (string, string) {
			rs := testenv.StartRedis(t)
			u, err := url.Parse(rs.URL())
			if err != nil {
				t.Fatal(err)
			}
			return rs.URL(), u.Host
		}},
	}
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			t.Parallel()
			dsn, target := st.dsn(t)
			fp := testenv.NewFaultProxy(t, target)
			up := newUpstream(t)
			p := startProxy(t, "--upstream", up.srv.URL, "--store", testenv.Redirect(dsn, fp.Addr()), "--store-timeout", "1s")
			if a := post(t, p.url, "warm", "x"); a.status != 201 {
				t.Fatalf("warm-up: %+v", a)
			}

			// Begin past its deadline: 503 store-unavailable with
			// Retry-After, and the service was never called.
			fp.Set(testenv.BlackHole)
			t0 := time.Now()
			a := post(t, p.url, "begin-hang", "x")
			took := time.Since(t0)
			t.Logf("Begin black-holed: %d after %v", a.status, took.Round(time.Millisecond))
			if a.err != nil || a.status != 503 || !strings.Contains(a.body, "store-unavailable") || a.header.Get("Retry-After") == "" || took > storeHang {
				t.Fatalf("Begin black-holed: %+v after %v; want 503 store-unavailable with Retry-After", a, took)
			}
			if n := up.count("begin-hang"); n != 0 {
				t.Fatalf("the service ran %d times with no claim", n)
			}

			// The service answers, then the store goes silent: Complete
			// past its deadline answers 503 not-stored, never a success
			// that no retry could replay, and the key never runs again.
			fp.Set(testenv.Pass)
			// First the store must answer again: its pooled connections
			// sat in the black hole, and on a loaded machine the first
			// requests after it can still be refused (503) before the
			// service is called, which left the wait below blocked for
			// ever (the package was killed at 10 minutes).
			rewarm := 0
			poll(t, "the store to answer after the black hole", func() bool {
				rewarm++
				return post(t, p.url, fmt.Sprint("rewarm-", rewarm), "x").status == 201
			})
			started, release := up.hold("complete-hang")
			t.Cleanup(release) // before the service's Close, which waits for its handlers
			done := make(chan answer, 1)
			t0 = time.Now()
			go func() { done <- send(context.Background(), p.url, "complete-hang", "x") }()
			select {
			case <-started:
			case a := <-done:
				t.Fatalf("the proxy answered %+v before calling the service", a)
			case <-time.After(storeHang):
				t.Fatalf("the service was not called within %v", storeHang)
			}
			fp.Set(testenv.BlackHole)
			release()
			a = <-done
			took = time.Since(t0)
			t.Logf("Complete black-holed: %d after %v", a.status, took.Round(time.Millisecond))
			if a.err != nil || a.status != 503 || !strings.Contains(a.body, "not-stored") || took > storeHang {
				t.Fatalf("Complete black-holed: %+v after %v; want 503 not-stored", a, took)
			}
			fp.Set(testenv.Pass)
			var r answer
			poll(t, "the store to answer again", func() bool { r = post(t, p.url, "complete-hang", "x"); return r.status != 503 })
			if r.status == 201 || up.count("complete-hang") != 1 {
				t.Fatalf("retry after the lost Complete: %+v, executions %d; want the key held (409 while the claim lives), never run again", r, up.count("complete-hang"))
			}
		})
	}
}

// TestE2EStoreBlackHoleSigterm: SIGTERM while requests wait on a
// black-holed store: every waiting client is answered before the process
// exits, and it exits 0.
func TestE2EStoreBlackHoleSigterm(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.PostgresDB(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	fp := testenv.NewFaultProxy(t, u.Host)
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", testenv.Redirect(dsn, fp.Addr()), "--store-timeout", "2s")
	if a := post(t, p.url, "warm", "x"); a.status != 201 {
		t.Fatalf("warm-up: %+v", a)
	}
	// Half the requests are in the service when the store goes silent
	// (their Complete hangs), half arrive after (their Begin hangs).
	const n = 8
	var wg sync.WaitGroup
	answers := make([]answer, 2*n)
	var releases []func()
	for i := range n {
		key := "in-service-" + string(rune('a'+i))
		started, release := up.hold(key)
		releases = append(releases, release)
		wg.Go(func() { answers[i] = send(context.Background(), p.url, key, "x") })
		<-started
	}
	fp.Set(testenv.BlackHole)
	for _, r := range releases {
		r()
	}
	for i := range n {
		wg.Go(func() { answers[n+i] = send(context.Background(), p.url, "arriving-"+string(rune('a'+i)), "x") })
	}
	time.Sleep(200 * time.Millisecond) // let them reach the proxy: no assertion depends on it
	t0 := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	code := p.exitCode()
	t.Logf("every client answered and the proxy exited %v after SIGTERM", time.Since(t0).Round(time.Millisecond))
	for i, a := range answers {
		if a.err != nil || a.status != 503 {
			t.Errorf("client %d during SIGTERM with a black-holed store: %+v; want 503", i, a)
		}
	}
	if code != 0 {
		t.Fatalf("exit code %d\n%s", code, p.stderr)
	}
}
