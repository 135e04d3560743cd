package natsoutbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// BenchmarkRelay compares the relay's throughput with a raw loop that
// publishes the same messages to JetStream (memory stream, shared server)
// asynchronously, a batch at a time, and waits for every PubAck of the
// batch before the next: the best a publisher with confirms does on one
// connection. The relay's messages are enqueued on PostgreSQL over 1,000
// ordering keys before the timer starts; a started relay then claims
// (FOR UPDATE SKIP LOCKED), publishes through natsoutbox, waits for the
// PubAcks, marks the batch sent with one UPDATE and commits, Concurrency
// passes at a time; the timer stops when the Observer has counted every
// message published. The goal is relay ÷ raw ≥ 0.8 in messages per
// second, at the same batch size. Interleave the rounds:
//
//	for i in 1 2 3 4 5; do go test -run '^$' -bench Relay -benchtime 5000x ./natsoutbox/; done
func BenchmarkRelay(b *testing.B) {
	url := testenv.NATS.Need(b)
	const keys = 1000
	for _, batch := range []int{100, 500} {
		bs := strconv.Itoa(batch)
		b.Run("raw_batch"+bs, func(b *testing.B) { benchRaw(b, url, batch) })
		b.Run("relay_batch"+bs, func(b *testing.B) { benchRelay(b, url, batch, 2, keys) })
	}
	// One pass at a time: what the pipelining buys.
	b.Run("relay_batch500_serial", func(b *testing.B) { benchRelay(b, url, 500, 1, keys) })
}

func benchRaw(b *testing.B, url string, batch int) {
	p := newPipeline(b, url, jetstream.MemoryStorage, 0, outbox.Postgres)
	b.ResetTimer()
	for i := 0; i < b.N; i += batch {
		var fs []jetstream.PubAckFuture
		for j := i; j < min(i+batch, b.N); j++ {
			m := nats.NewMsg(p.stream + ".orders")
			m.Data = []byte(strconv.Itoa(j))
			m.Header.Set("Content-Type", "text/plain")
			m.Header.Set(natsoutbox.OrderingKeyHeader, "k"+strconv.Itoa(j%1000))
			f, err := p.js.PublishMsgAsync(m, jetstream.WithMsgID("m-"+strconv.Itoa(j)))
			if err != nil {
				b.Fatal(err)
			}
			fs = append(fs, f)
		}
		for _, f := range fs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
}

func benchRelay(b *testing.B, url string, batch, concurrency, keys int) {
	p := newPipeline(b, url, jetstream.MemoryStorage, 0, outbox.Postgres)
	p.enqueue(b, 0, b.N, keys)
	pub, err := natsoutbox.New(p.js, nil)
	if err != nil {
		b.Fatal(err)
	}
	runRelay(b, p.ob, pub, &outbox.RelayConfig{BatchSize: batch, Concurrency: concurrency})
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
