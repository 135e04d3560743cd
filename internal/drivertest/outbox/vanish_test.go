package outbox_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
)

// vanishPassTimeout is the PassTimeout of both relays in
// TestVanishedRelayHost.
const vanishPassTimeout = 3 * time.Second

// vanishingRelay is the child of TestVanishedRelayHost: a relay that
// claims every pending message and then hangs in Publish, its claim
// transaction open, until the parent SIGKILLs it.
func vanishingRelay(ctx context.Context, c testenv.SQLChild) error {
	ob, err := outbox.New(c.DB, &outbox.Config{Dialect: c.Dialect, Table: c.Table})
	if err != nil {
		return err
	}
	pub := &hangingPublisher{claimed: make(chan int, 1)}
	r, err := ob.NewRelay(pub, &outbox.RelayConfig{BatchSize: 1000, PassTimeout: vanishPassTimeout, PublishTimeout: vanishPassTimeout / 2})
	if err != nil {
		return err
	}
	errc := make(chan error, 1)
	go func() { _, err := r.RunOnce(ctx); errc <- err }()
	select {
	case n := <-pub.claimed:
		if n == 0 {
			return errors.New("claimed nothing")
		}
		return nil
	case err := <-errc:
		return errors.Join(errors.New("the pass ended before publishing"), err)
	}
}

type hangingPublisher struct{ claimed chan int }

func (h *hangingPublisher) Publish(ctx context.Context, batch []outbox.Message) []error {
	h.claimed <- len(batch)
	select {} // the host is gone: nothing returns, nothing is sent
}

// silentForwarder is a TCP forwarder to a database that never passes a
// client's close on: when the client goes away the server's side stays
// open and silent, as when the client's host vanished (power lost, cable
// cut) and no FIN or RST ever reaches the server.
type silentForwarder struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newSilentForwarder(t *testing.T, target string) *silentForwarder {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &silentForwarder{ln: ln, target: target}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

func (f *silentForwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", f.target, 5*time.Second)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, s)
		f.mu.Unlock()
		f.wg.Add(2)
		go func() { defer f.wg.Done(); _, _ = io.Copy(s, c) }() // the client's end: not passed on
		go func() { defer f.wg.Done(); _, _ = io.Copy(c, s) }()
	}
}

func (f *silentForwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}

// hostOf returns the host:port of a postgres:// URL or a go-sql-driver
// DSN (user@tcp(host:port)/db).
func hostOf(t *testing.T, dsn string) string {
	if _, rest, ok := strings.Cut(dsn, "@tcp("); ok {
		host, _, _ := strings.Cut(rest, ")")
		return host
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// TestVanishedRelayHost: a relay claims 500 messages over 50 keys and its
// host vanishes — the process is SIGKILLed behind a forwarder that never
// passes the close on, so the server keeps its session, idle in the claim
// transaction, holding the rows' locks (PostgreSQL would wait for its TCP
// keepalive, two hours by default; MariaDB for wait_timeout, eight). The
// claim transaction is bounded on the server (idle for PassTimeout, it is
// ended), so a second relay publishes every message within PassTimeout
// plus slack; without the bound it published none.
func TestVanishedRelayHost(t *testing.T) {
	t.Parallel()
	for _, b := range backends()[:2] {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, dsn := b.open(t)
			table := testenv.Name("ob")
			ob, err := outbox.New(db, &outbox.Config{Dialect: b.dialect, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if err := ob.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			f := &fixture{db: db, ob: ob, b: b, table: table}
			const n, keys = 500, 50
			for i := 0; i < n; i += 50 {
				var ms []outbox.Message
				for j := i; j < i+50; j++ {
					ms = append(ms, outbox.Message{ID: "m-" + strconv.Itoa(j), Destination: "d", OrderingKey: "k" + strconv.Itoa(j%keys), Payload: []byte(strconv.Itoa(j/keys + 1))})
				}
				f.enqueue(t, ms...)
			}
			fwd := newSilentForwarder(t, hostOf(t, dsn))
			testenv.KillSQLChild(t, b.dialect, testenv.Redirect(dsn, fwd.ln.Addr().String()), table)

			broker := newKeyBroker(0)
			r, err := ob.NewRelay(broker, &outbox.RelayConfig{PassTimeout: vanishPassTimeout, PublishTimeout: vanishPassTimeout / 2, PollInterval: 20 * time.Millisecond, Retention: -1})
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer r.Stop(context.Background())
			// PassTimeout plus generous slack (the server checks idle
			// sessions at its own pace, and the machine is busy); a lock
			// held for the TCP keepalive's two hours never gets there.
			deadline := start.Add(vanishPassTimeout + 30*time.Second)
			for f.countState(t, outbox.Sent) < n {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d messages sent %v after the relay's host vanished", f.countState(t, outbox.Sent), n, time.Since(start).Round(time.Second))
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Logf("all %d sent %v after the relay's host vanished", n, time.Since(start).Round(time.Millisecond))
			broker.check(t)
		})
	}
}

// TestClaimTimeoutStaysInThePass: on MariaDB the claim's bound is a
// session variable of a pooled connection, which the application's
// transactions use too; after relay passes (one that claimed, one that
// did not) the pool's only connection has the server's default again.
func TestClaimTimeoutStaysInThePass(t *testing.T) {
	t.Parallel()
	f := newFixture(t, backends()[1])
	ctx := ctxT(t)
	f.db.SetMaxOpenConns(1)
	var def int64
	if err := f.db.QueryRowContext(ctx, `SELECT @@GLOBAL.idle_transaction_timeout`).Scan(&def); err != nil {
		t.Skipf("no idle_transaction_timeout (MySQL, not MariaDB): %v", err)
	}
	f.enqueue(t, msg("a", "k"))
	r, err := f.ob.NewRelay(newRecorder(), &outbox.RelayConfig{PassTimeout: 7 * time.Second, Retention: -1})
	if err != nil {
		t.Fatal(err)
	}
	for want := 1; want >= 0; want-- {
		n, err := r.RunOnce(ctx)
		if err != nil || n != want {
			t.Fatalf("RunOnce = %d, %v; want %d", n, err, want)
		}
		var got int64
		if err := f.db.QueryRowContext(ctx, `SELECT @@SESSION.idle_transaction_timeout`).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != def {
			t.Fatalf("the pool's connection kept idle_transaction_timeout = %d after a pass (default %d)", got, def)
		}
	}
}
