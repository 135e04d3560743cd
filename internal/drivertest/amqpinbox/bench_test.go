package amqpinbox_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// BenchmarkConsume measures deliveries/s from one RabbitMQ queue:
//
//	raw-ack:     the raw client: Consume (manual ack, same prefetch) + Ack
//	raw-tx-ack:  the same + the business transaction without a dedup row
//	inbox:       the Subscriber: Process (dedup row + business tx) + Ack
//
// The inbox DB is PostgreSQL; b.N unique messages are queued first.
func BenchmarkConsume(b *testing.B) {
	for _, workers := range []int{1, 8} {
		w := strconv.Itoa(workers)
		if workers == 1 {
			b.Run("raw-ack/workers="+w, func(b *testing.B) { benchRaw(b, workers, false) })
		}
		b.Run("raw-tx-ack/workers="+w, func(b *testing.B) { benchRaw(b, workers, true) })
		b.Run("inbox/workers="+w, func(b *testing.B) { benchInbox(b, workers) })
	}
}

func benchSetup(b *testing.B) (*amqpEnv, *effectDB) {
	env := newAMQP(b, nil)
	edb, _ := newPostgresInbox(b)
	edb.DB.SetMaxIdleConns(16)
	ctx := context.Background()
	var last *amqp.DeferredConfirmation
	for i := range b.N {
		c, err := env.ch.PublishWithDeferredConfirmWithContext(ctx, "", env.queue, false, false, amqp.Publishing{MessageId: "m-" + strconv.Itoa(i), Body: []byte("x")})
		if err != nil {
			b.Fatal(err)
		}
		last = c
	}
	if last != nil {
		last.Wait()
	}
	return env, edb
}

func benchRaw(b *testing.B, workers int, tx bool) {
	env, edb := benchSetup(b)
	b.ResetTimer()
	ch, err := env.conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	_ = ch.Qos(2*workers, 0, false)
	ds, err := ch.Consume(env.queue, "bench", false, false, false, false, nil)
	if err != nil {
		b.Fatal(err)
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	done := make(chan struct{})
	for range workers {
		go func() {
			for d := range ds {
				if tx {
					ctx := context.Background()
					t, err := edb.DB.BeginTx(ctx, nil)
					if err == nil {
						err = effect(ctx, t, &d)
					}
					if err == nil {
						err = t.Commit()
					}
					if err != nil {
						b.Error(err)
					}
				}
				_ = d.Ack(false)
				if left.Add(-1) == 0 {
					close(done)
				}
			}
		}()
	}
	<-done
	b.StopTimer()
	_ = ch.Cancel("bench", false)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func benchInbox(b *testing.B, workers int) {
	env, edb := benchSetup(b)
	p, all := adaptertest.CountDown(edb.Inbox, int64(b.N))
	b.ResetTimer()
	s := newSub(b, p, env.conn, effect, amqpinbox.Config{Queue: env.queue, Concurrency: workers})
	<-all
	b.StopTimer()
	stop(b, s)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
