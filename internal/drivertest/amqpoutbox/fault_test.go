package amqpoutbox_test

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpoutbox"
)

// faultRig is an outbox on PostgreSQL whose relay publishes to the shared
// RabbitMQ through a fault proxy, and an amqpinbox consumer on a direct
// connection that records each applied message in an effects table.
type faultRig struct {
	ctx     context.Context
	db      *sql.DB
	ob      *outbox.Outbox
	table   string
	queue   string
	effects string
	proxy   *testenv.FaultProxy
	pub     *trackingPublisher
	relay   *outbox.Relay
	ch      *amqp.Channel
}

// trackingPublisher counts Publish calls and the calls in flight.
type trackingPublisher struct {
	outbox.Publisher
	calls, inflight atomic.Int64
}

func (c *trackingPublisher) Publish(ctx context.Context, b []outbox.Message) []error {
	c.calls.Add(1)
	c.inflight.Add(1)
	defer c.inflight.Add(-1)
	return c.Publisher.Publish(ctx, b)
}

func newFaultRig(t *testing.T, cfg outbox.RelayConfig) *faultRig {
	t.Helper()
	rawURL := testenv.AMQP.Need(t)
	ctx := ctxT(t)
	db, _ := testenv.PostgresDB(t)
	table := testenv.Name("ob")
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := amqp.Dial(rawURL)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := testenv.Name("idemt-fault")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = ch.QueueDelete(queue, false, false, false) })
	effects := table + "_effects"
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+effects+` (seq bigserial PRIMARY KEY, message_id text NOT NULL, okey text NOT NULL, n int NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: table + "_inbox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		n, _ := strconv.Atoi(string(d.Body))
		k, _ := d.Headers[amqpoutbox.OrderingKeyHeader].(string)
		_, err := tx.ExecContext(ctx, `INSERT INTO `+effects+` (message_id, okey, n) VALUES ($1, $2, $3)`, d.MessageId, k, n)
		return err
	}
	sub, err := amqpinbox.New(ib, conn, h, &amqpinbox.Config{Queue: queue})
	if err != nil {
		t.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Stop(context.Background()) })

	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	pub, err := amqpoutbox.New(testenv.Redirect(rawURL, proxy.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	tp := &trackingPublisher{Publisher: pub}
	r, err := ob.NewRelay(tp, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	rig := &faultRig{ctx: ctx, db: db, ob: ob, table: table, queue: queue, effects: effects, proxy: proxy, pub: tp, relay: r, ch: ch}
	t.Cleanup(func() { rig.stopWithin(t, 60*time.Second) })
	return rig
}

func (r *faultRig) enqueue(t *testing.T, from, to int) {
	adaptertest.EnqueueOrdered(t, r.ctx, r.db, r.ob, r.queue, 10, from, to)
}

// waitApplied waits for n messages applied; it fails when none was for
// stall.
func (r *faultRig) waitApplied(t *testing.T, n int, stall time.Duration) {
	adaptertest.WaitApplied(t, r.ctx, r.db, r.effects, n, stall)
}

// stopWithin stops the relay, giving the passes in hand 5 s, and fails
// when Stop has not returned after bound (a relay stuck in its publisher
// never returns).
func (r *faultRig) stopWithin(t *testing.T, bound time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- r.relay.Stop(ctx)
	}()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("relay Stop did not return within %v", bound)
	}
}

// checkOrder fails when a key's messages were applied out of order, or
// when a message is not sent.
func (r *faultRig) checkOrder(t *testing.T) {
	t.Helper()
	rows, err := r.db.QueryContext(r.ctx, `SELECT okey, n FROM `+r.effects+` ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]int{}
	for rows.Next() {
		var k string
		var v int
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatal(err)
		}
		if v != last[k]+1 {
			t.Fatalf("key %s: #%d applied after #%d", k, v, last[k])
		}
		last[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
}

func (r *faultRig) unsent(t *testing.T) int {
	t.Helper()
	var n int
	if err := r.db.QueryRowContext(r.ctx, `SELECT COUNT(*) FROM `+r.table+` WHERE state <> 1`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestConnectionResetWithConfirmsOutstanding resets the publisher's
// connection while a batch awaits its confirms: the link is black-holed
// until a Publish is in flight on it, then every connection is reset and
// the link passes again. The library closes the channel, which closes its
// returns channel and nacks the outstanding confirms; the publisher once
// spun on the closed returns channel holding its mutex, and the relay
// never published again nor stopped. Now the pass fails, the messages
// stay pending, the publisher dials again and the relay catches up within
// its backoff: every message applied once, per key in order, and Stop
// returns.
func TestConnectionResetWithConfirmsOutstanding(t *testing.T) {
	t.Parallel()
	r := newFaultRig(t, outbox.RelayConfig{
		PublishTimeout: 20 * time.Second, // the reset, not the timeout, ends the wait
		MinBackoff:     50 * time.Millisecond, MaxBackoff: time.Second,
		PollInterval: 10 * time.Millisecond, Concurrency: 2,
	})
	r.enqueue(t, 0, 100)
	r.waitApplied(t, 100, 60*time.Second)

	r.proxy.Set(testenv.BlackHole)
	before := r.pub.calls.Load()
	r.enqueue(t, 100, 200)
	adaptertest.WaitFor(t, "a Publish in flight on the black-holed link", 30*time.Second, func() bool {
		return r.pub.calls.Load() > before && r.pub.inflight.Load() > 0
	})
	time.Sleep(300 * time.Millisecond) // its frames are on the wire, unconfirmed
	if r.pub.inflight.Load() == 0 {
		t.Fatal("the Publish ended before the reset: the test proves nothing")
	}
	r.proxy.Set(testenv.Pass)
	r.proxy.ResetAll()

	// MaxBackoff is 1 s: the deadline is far beyond it, and far below the
	// PublishTimeout a stuck publisher would need to give up.
	r.waitApplied(t, 200, 15*time.Second)
	r.checkOrder(t)
	if n := r.unsent(t); n != 0 {
		t.Fatalf("%d messages not sent", n)
	}
	r.stopWithin(t, 30*time.Second)
}

// processCPU returns the user and system CPU time of this process.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestBlackHoleCPUBounded black-holes the publisher's link for 4 s with
// four passes in flight and messages still being committed. The passes
// time out, their connection is dropped while the others still await
// confirms on it (the case that once spun: the library closes the
// returns channel and the drain read it forever holding the mutex),
// and the relay backs off. The process's CPU time during the outage must
// stay under a quarter of the outage's length: a relay that backs off
// uses a few milliseconds, a spinning goroutine a whole core (still
// seconds on a loaded machine). This test is not parallel, so that the
// process's CPU is this test's alone. Then the link passes again and
// every message is applied once, in order, and Stop returns.
func TestBlackHoleCPUBounded(t *testing.T) {
	const outage = 4 * time.Second
	r := newFaultRig(t, outbox.RelayConfig{
		PublishTimeout: 500 * time.Millisecond,
		MinBackoff:     50 * time.Millisecond, MaxBackoff: time.Second,
		PollInterval: 10 * time.Millisecond, Concurrency: 4, BatchSize: 5,
	})
	r.enqueue(t, 0, 100)
	r.waitApplied(t, 100, 60*time.Second)

	r.proxy.Set(testenv.BlackHole)
	r.enqueue(t, 100, 300) // the business goes on; its CPU is not the relay's
	cpu0 := processCPU(t)
	start := time.Now()
	time.Sleep(outage)
	cpu := processCPU(t) - cpu0
	wall := time.Since(start)
	r.proxy.Set(testenv.Pass)
	t.Logf("CPU during the %v outage: %v", wall.Round(time.Millisecond), cpu)
	if cpu > wall/4 {
		t.Errorf("CPU %v during a %v outage: the relay spins", cpu, wall.Round(time.Millisecond))
	}
	r.waitApplied(t, 300, 30*time.Second)
	r.checkOrder(t)
	if n := r.unsent(t); n != 0 {
		t.Fatalf("%d messages not sent", n)
	}
	r.stopWithin(t, 30*time.Second)
}

// TestMissingExchange enqueues a message to an exchange that does not
// exist among messages of other keys to a queue. The broker closes the
// publisher's channel with 404 NOT_FOUND; the message is parked with the
// reason (it once hung the relay like a lost connection), the next
// message of its key waits behind it, and every other message is applied
// once, in order. Stop returns.
func TestMissingExchange(t *testing.T) {
	t.Parallel()
	r := newFaultRig(t, outbox.RelayConfig{
		PublishTimeout: 5 * time.Second,
		MinBackoff:     50 * time.Millisecond, MaxBackoff: time.Second,
		PollInterval: 10 * time.Millisecond, Concurrency: 2, BatchSize: 16,
	})
	exchange := testenv.Name("idemt-noex")
	tx, err := r.db.BeginTx(r.ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range []outbox.Message{
		{ID: "bad-1", Destination: exchange + "/rk", OrderingKey: "bad"},
		{ID: "bad-2", Destination: r.queue, OrderingKey: "bad", Payload: []byte("1")},
	} {
		if err := r.ob.Enqueue(r.ctx, tx, m); err != nil {
			t.Fatal(i, err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	r.enqueue(t, 0, 200)
	r.waitApplied(t, 200, 60*time.Second)
	r.checkOrder(t)
	adaptertest.WaitFor(t, "the message to the missing exchange parked", 30*time.Second, func() bool {
		in, err := r.ob.Get(r.ctx, "bad-1")
		return err == nil && in.State == outbox.Parked
	})
	in, _ := r.ob.Get(r.ctx, "bad-1")
	if !strings.Contains(in.Reason, "does not exist") || !strings.Contains(in.Reason, exchange) || outbox.ReasonClass(in.Reason) != outbox.ReasonMissingExchange {
		t.Fatalf("parked with reason %q; want the missing exchange named", in.Reason)
	}
	if in, err := r.ob.Get(r.ctx, "bad-2"); err != nil || in.State != outbox.Pending {
		t.Fatalf("the next message of the key: %+v, %v; want pending behind the parked one", in, err)
	}
	t.Logf("parked: %s", in.Reason)
	r.stopWithin(t, 30*time.Second)
}
