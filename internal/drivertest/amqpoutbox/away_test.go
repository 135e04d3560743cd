package amqpoutbox_test

import (
	"context"
	"database/sql"
	"net/url"
	"strconv"
	"sync/atomic"
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

// countingPublisher counts Publish calls.
type countingPublisher struct {
	outbox.Publisher
	calls atomic.Int64
}

func (c *countingPublisher) Publish(ctx context.Context, b []outbox.Message) []error {
	c.calls.Add(1)
	return c.Publisher.Publish(ctx, b)
}

// TestBrokerAway black-holes the relay's link to the shared RabbitMQ (the
// repository's fault proxy between the publisher and the broker: the TCP
// connection stays open and nothing arrives either way, so no confirm
// comes and a new connection's handshake hangs) for 3 s while messages
// keep being committed. The relay backs off (a bounded number of publish
// attempts), nothing is lost, it catches up once the link is back, and
// amqpinbox (on a direct connection) applies every message once, per key
// in commit order. Publish must give up at the relay's PublishTimeout even
// then, so there are several attempts during the outage, but not many.
//
// Sized at 3 s: with waits doubling from 50 ms to 1 s the backoff reaches
// its cap within the first seconds, so a longer outage only repeats the
// same capped wait.
func TestBrokerAway(t *testing.T) {
	t.Parallel()
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
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := testenv.Name("idemt-away")
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	defer ch.QueueDelete(queue, false, false, false)
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
	defer sub.Stop(context.Background())

	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewFaultProxy(t, u.Host)
	pub, err := amqpoutbox.New(testenv.Redirect(rawURL, proxy.Addr()), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	cp := &countingPublisher{Publisher: pub}
	r, err := ob.NewRelay(cp, &outbox.RelayConfig{PublishTimeout: 500 * time.Millisecond, MinBackoff: 50 * time.Millisecond, MaxBackoff: time.Second, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())

	const keys = 10
	enqueue := func(from, to int) { adaptertest.EnqueueOrdered(t, ctx, db, ob, queue, keys, from, to) }
	waitApplied := func(n int) { adaptertest.WaitApplied(t, ctx, db, effects, n, adaptertest.StallTimeout) }
	enqueue(0, 100)
	waitApplied(100)
	proxy.Set(testenv.BlackHole)
	before := cp.calls.Load()
	enqueue(100, 200) // the business goes on while the broker is away
	time.Sleep(3 * time.Second)
	during := cp.calls.Load() - before
	proxy.Set(testenv.Pass)
	waitApplied(200)

	rows, err := db.QueryContext(ctx, `SELECT okey, n FROM `+effects+` ORDER BY seq`)
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
	var open int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+table+` WHERE state <> 1`).Scan(&open); err != nil || open != 0 {
		t.Fatalf("%d messages not sent (%v)", open, err)
	}
	// Spinning would be thousands of calls; with two passes in flight,
	// each waiting up to 500 ms for its confirms and then backing off from
	// 50 ms to 1 s, it is a handful.
	if during > 40 {
		t.Fatalf("%d publish attempts in a 3 s outage: the relay spins", during)
	}
	// And the publisher gives up at PublishTimeout (a dropped connection
	// is closed within a second, a new handshake ends with the context):
	// one Publish hanging for the whole outage would be a single call.
	if during < 2 {
		t.Fatalf("%d publish attempts in a 3 s outage: Publish outlived its timeout", during)
	}
	t.Logf("%d publish attempts during the 3 s outage", during)
}
