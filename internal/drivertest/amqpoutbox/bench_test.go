package amqpoutbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpoutbox"
)

// BenchmarkRelay compares the relay's throughput with a raw loop on the
// shared RabbitMQ: a channel in confirm mode publishes a batch of
// persistent, mandatory messages to a durable queue, all in flight
// together, and waits for every confirm of the batch before the next.
// The relay's messages are enqueued on PostgreSQL over 1,000 ordering keys
// before the timer starts; a started relay (Concurrency 2) claims,
// publishes through amqpoutbox, waits for the confirms, marks the batch
// sent and commits; the timer stops when the Observer has counted every
// message published. The goal is relay ÷ raw ≥ 0.8 in messages per second,
// at the same batch size. Interleave the rounds:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench Relay -benchtime 5000x ./amqpoutbox/; done
func BenchmarkRelay(b *testing.B) {
	url := testenv.AMQP.Need(b)
	for _, batch := range []int{100, 500} {
		bs := strconv.Itoa(batch)
		b.Run("raw_batch"+bs, func(b *testing.B) { benchRaw(b, url, batch) })
		b.Run("relay_batch"+bs, func(b *testing.B) { benchRelay(b, url, batch, 2) })
	}
	b.Run("relay_batch500_serial", func(b *testing.B) { benchRelay(b, url, 500, 1) })
}

// benchQueue declares a durable queue and deletes it when b ends.
func benchQueue(b *testing.B, url string) (*amqp.Connection, *amqp.Channel, string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(b, "RabbitMQ", err)
	}
	b.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := testenv.Name("idemb-ob")
	if _, err := ch.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _, _ = ch.QueueDelete(q, false, false, false) })
	return conn, ch, q
}

func benchRaw(b *testing.B, url string, batch int) {
	conn, _, q := benchQueue(b, url)
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		var dcs []*amqp.DeferredConfirmation
		for j := i; j < min(i+batch, b.N); j++ {
			msg := amqp.Publishing{MessageId: "m-" + strconv.Itoa(j), Body: []byte(strconv.Itoa(j)), DeliveryMode: amqp.Persistent,
				Headers: amqp.Table{amqpoutbox.OrderingKeyHeader: "k" + strconv.Itoa(j%1000)}}
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q, true, false, msg)
			if err != nil {
				b.Fatal(err)
			}
			dcs = append(dcs, dc)
		}
		for _, dc := range dcs {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				b.Fatalf("confirm: %v, %v", ok, err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

func benchRelay(b *testing.B, url string, batch, concurrency int) {
	_, _, q := benchQueue(b, url)
	ctx := context.Background()
	db, _ := testenv.PostgresDB(b)
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres, Table: testenv.Name("ob")})
	if err != nil {
		b.Fatal(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i += 10 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		for j := i; j < min(i+10, b.N); j++ {
			m := outbox.Message{ID: "m-" + strconv.Itoa(j), Destination: q, OrderingKey: "k" + strconv.Itoa(j%1000), Payload: []byte(strconv.Itoa(j))}
			if err := ob.Enqueue(ctx, tx, m); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	pub, err := amqpoutbox.New(url, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer pub.Close()
	runRelay(b, ob, pub, &outbox.RelayConfig{BatchSize: batch, Concurrency: concurrency})
}

// runRelay starts a relay on b.N pending messages, stops the timer once
// the Observer counted them all published, and reports msg/s.
func runRelay(b *testing.B, ob *outbox.Outbox, pub outbox.Publisher, cfg *outbox.RelayConfig) {
	c := &countObserver{want: int64(b.N), done: make(chan struct{})}
	cfg.Observer = c
	r, err := ob.NewRelay(pub, cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ResetTimer()
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	select {
	case <-c.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d published after 5 min", c.n.Load(), b.N)
	}
	b.StopTimer()
	if err := r.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if c.retried.Load() > 0 {
		b.Fatalf("%d publishes retried", c.retried.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

type countObserver struct {
	n, retried atomic.Int64
	want       int64
	done       chan struct{}
}

func (c *countObserver) Published(n int) {
	if c.n.Add(int64(n)) == c.want {
		close(c.done)
	}
}
func (c *countObserver) Retried(outbox.Message, error) { c.retried.Add(1) }
func (c *countObserver) Parked(outbox.Message, string) {}
func (c *countObserver) Lag(time.Duration)             {}
