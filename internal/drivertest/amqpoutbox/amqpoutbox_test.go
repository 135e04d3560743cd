package amqpoutbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpoutbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestOutboxToInbox: two relays publish 300 messages over 10 keys to a
// queue with confirms; amqpinbox, with no MessageIDFunc (the message-id
// property is the message ID), applies each exactly once, per key in
// commit order. A message to a routing key with no queue is returned by
// the broker and parked, and does not hold up the others.
func TestOutboxToInbox(t *testing.T) {
	t.Parallel()
	url := testenv.AMQP.Need(t)
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
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := testenv.Name("idemt-ob")
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

	for range 2 {
		pub, err := amqpoutbox.New(url, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer pub.Close()
		r, err := ob.NewRelay(pub, &outbox.RelayConfig{BatchSize: 32, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer r.Stop(context.Background())
	}
	const n, keys = 300, 10
	for i := 0; i < n; i += 10 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for j := i; j < i+10; j++ {
			m := outbox.Message{ID: "m-" + strconv.Itoa(j), Destination: queue, OrderingKey: "k" + strconv.Itoa(j%keys), Payload: []byte(strconv.Itoa(j/keys + 1))}
			if j == 5 {
				if err := ob.Enqueue(ctx, tx, outbox.Message{ID: "lost", Destination: "/no-such-queue", OrderingKey: "other"}); err != nil {
					t.Fatal(err)
				}
			}
			if err := ob.Enqueue(ctx, tx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	adaptertest.WaitApplied(t, ctx, db, effects, n, adaptertest.StallTimeout)
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
	in, err := ob.Get(ctx, "lost")
	if err != nil || in.State != outbox.Parked || outbox.ReasonClass(in.Reason) != outbox.ReasonNoRoute {
		t.Fatalf("unroutable message: %+v, %v; want parked with the reason, class no_route", in, err)
	}
	t.Logf("parked: %s", in.Reason)
}
