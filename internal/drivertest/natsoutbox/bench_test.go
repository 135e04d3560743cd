package natsoutbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/natsoutbox"
)

// BenchmarkRelay compares the relay's throughput (claim from PostgreSQL,
// publish to JetStream, wait for the PubAcks, mark sent, commit; batches
// of 100, and of 500) with a raw loop that publishes the same messages asynchronously
// in batches of 100 and waits for their PubAcks. For the relay the
// messages are enqueued (over 1,000 ordering keys) before the timer
// starts. The goal is relay ÷ raw ≥ 0.8 in messages per second.
//
//	go test -run '^$' -bench Relay -benchtime 5000x -count 6 ./outbox/natsoutbox/
func BenchmarkRelay(b *testing.B) {
	url := testenv.NATS.Need(b)
	const batch, keys = 100, 1000
	b.Run("raw", func(b *testing.B) {
		p := newPipeline(b, url, jetstream.MemoryStorage, 0, outbox.Postgres)
		b.ResetTimer()
		for i := 0; i < b.N; i += batch {
			var fs []jetstream.PubAckFuture
			for j := i; j < min(i+batch, b.N); j++ {
				m := nats.NewMsg(p.stream + ".orders")
				m.Data = []byte(strconv.Itoa(j))
				m.Header.Set("Content-Type", "text/plain")
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
	})
	b.Run("relay", func(b *testing.B) { benchRelay(b, url, batch, keys) })
	// The same relay with batches of 500: fewer commits per message.
	b.Run("relay_batch500", func(b *testing.B) { benchRelay(b, url, 500, keys) })
}

func benchRelay(b *testing.B, url string, batch, keys int) {
	{
		p := newPipeline(b, url, jetstream.MemoryStorage, 0, outbox.Postgres)
		p.enqueue(b, 0, b.N, keys)
		pub, err := natsoutbox.New(p.js, nil)
		if err != nil {
			b.Fatal(err)
		}
		r, err := p.ob.NewRelay(pub, &outbox.RelayConfig{BatchSize: batch})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.ResetTimer()
		for {
			n, err := r.RunOnce(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if n == 0 {
				break
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msg/s")
	}
}
