package kafkaoutbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/kafkaoutbox"
)

// BenchmarkRelay compares the relay's throughput with a raw loop, on
// Kafka simulated in process by kfake (one broker, a 3-partition topic; no
// disk, so the broker's side costs little and the ratio is a severe one):
// a franz-go client with the idempotent producer produces a batch with
// ProduceSync and waits for every acknowledgement before the next. The
// relay's messages are enqueued on PostgreSQL over 1,000 ordering keys
// before the timer starts; a started relay (Concurrency 2) claims,
// produces through kafkaoutbox, waits for the acks, marks the batch sent
// and commits; the timer stops when the Observer has counted every message
// published. The goal is relay ÷ raw ≥ 0.8 in messages per second, at the
// same batch size. Interleave the rounds:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench Relay -benchtime 5000x ./kafkaoutbox/; done
func BenchmarkRelay(b *testing.B) {
	for _, batch := range []int{100, 500} {
		bs := strconv.Itoa(batch)
		b.Run("raw_batch"+bs, func(b *testing.B) { benchRaw(b, batch) })
		b.Run("relay_batch"+bs, func(b *testing.B) { benchRelay(b, batch, 2) })
	}
	b.Run("relay_batch500_serial", func(b *testing.B) { benchRelay(b, 500, 1) })
}

const benchTopic = "orders"

func benchClient(b *testing.B) *kgo.Client {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, benchTopic))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	return cl
}

func benchRaw(b *testing.B, batch int) {
	cl := benchClient(b)
	ctx := context.Background()
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		var rs []*kgo.Record
		for j := i; j < min(i+batch, b.N); j++ {
			rs = append(rs, &kgo.Record{Topic: benchTopic, Key: []byte("k" + strconv.Itoa(j%1000)), Value: []byte(strconv.Itoa(j)),
				Headers: []kgo.RecordHeader{{Key: kafkaoutbox.MessageIDHeader, Value: []byte("m-" + strconv.Itoa(j))}}})
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

func benchRelay(b *testing.B, batch, concurrency int) {
	cl := benchClient(b)
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
			m := outbox.Message{ID: "m-" + strconv.Itoa(j), Destination: benchTopic, OrderingKey: "k" + strconv.Itoa(j%1000), Payload: []byte(strconv.Itoa(j))}
			if err := ob.Enqueue(ctx, tx, m); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	pub, err := kafkaoutbox.New(cl)
	if err != nil {
		b.Fatal(err)
	}
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
