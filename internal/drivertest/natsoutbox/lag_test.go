package natsoutbox_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// BenchmarkLag is a load program for the end-to-end lag at a steady 1,000
// messages per second: b.N messages, message i committed (one business
// transaction each, eight committing goroutines, 100 ordering keys) at
// start + i ms on PostgreSQL, a started relay publishing to JetStream, and
// an ordered JetStream consumer on the stream. The lag of a message is the
// time from its Commit returning to the consumer receiving it; the
// benchmark reports its p50 and p99 (and the rate achieved). With the
// relay's defaults (PollInterval 200 ms: a pass that finds nothing waits
// that long) and with PollInterval 10 ms. Not an assertion: a figure.
//
//	go test -run '^$' -bench Lag -benchtime 10000x ./natsoutbox/
func BenchmarkLag(b *testing.B) {
	url := testenv.NATS.Need(b)
	b.Run("poll200ms", func(b *testing.B) { benchLag(b, url, 0) })
	b.Run("poll10ms", func(b *testing.B) { benchLag(b, url, 10*time.Millisecond) })
}

func benchLag(b *testing.B, url string, poll time.Duration) {
	p := newPipeline(b, url, jetstream.MemoryStorage, 0, outbox.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := b.N
	committed := make([]atomic.Int64, n) // UnixNano after Commit returned
	received := make([]atomic.Int64, n)  // UnixNano of the first receipt
	var got atomic.Int64
	all := make(chan struct{})
	cons, err := p.js.OrderedConsumer(ctx, p.stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		b.Fatal(err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now().UnixNano()
		i, err := strconv.Atoi(string(m.Data()))
		if err != nil || i < 0 || i >= n {
			return
		}
		if received[i].CompareAndSwap(0, now) && got.Add(1) == int64(n) {
			close(all)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Stop()
	pub, err := natsoutbox.New(p.js, nil)
	if err != nil {
		b.Fatal(err)
	}
	r, err := p.ob.NewRelay(pub, &outbox.RelayConfig{PollInterval: poll})
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer r.Stop(context.Background())

	b.ResetTimer()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * time.Millisecond)))
				tx, err := p.odb.BeginTx(ctx, nil)
				if err != nil {
					b.Error(err)
					return
				}
				m := outbox.Message{ID: "m-" + strconv.Itoa(i), Destination: p.stream + ".orders", OrderingKey: "k" + strconv.Itoa(i%100), Payload: []byte(strconv.Itoa(i))}
				if err := p.ob.Enqueue(ctx, tx, m); err != nil {
					b.Error(err)
					_ = tx.Rollback()
					return
				}
				if err := tx.Commit(); err != nil {
					b.Error(err)
					return
				}
				committed[i].Store(time.Now().UnixNano())
			}
		}()
	}
	wg.Wait()
	rate := float64(n) / time.Since(start).Seconds()
	select {
	case <-all:
	case <-time.After(2 * time.Minute):
		b.Fatalf("%d of %d received", got.Load(), n)
	}
	b.StopTimer()
	lags := make([]time.Duration, n)
	for i := range lags {
		lags[i] = max(0, time.Duration(received[i].Load()-committed[i].Load()))
	}
	slices.Sort(lags)
	b.ReportMetric(float64(lags[n/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lags[n*99/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(rate, "commits/s")
}
