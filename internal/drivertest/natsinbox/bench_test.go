package natsinbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// BenchmarkConsume measures messages/s from one JetStream consumer:
//
//	raw-ack:       the raw client: Next + Ack, no database (the ceiling)
//	raw-tx-ack:    Next + the same business transaction without a dedup row + Ack
//	inbox:         the Subscriber: Process (dedup row + business tx) + Ack
//
// raw-tx-ack vs inbox is the adapter's and the dedup row's cost; the inbox DB
// is PostgreSQL. b.N unique messages are published before the timer starts.
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

func benchSetup(b *testing.B) (*natsEnv, *effectDB) {
	env := newNATS(b, 30*time.Second)
	edb, _ := newPostgresInbox(b)
	edb.DB.SetMaxIdleConns(16)
	ajs, _ := jetstream.New(env.nc, jetstream.WithPublishAsyncMaxPending(1024))
	for i := range b.N {
		m := nats.NewMsg(env.stream + ".orders")
		m.Header.Set(idHeader, "m-"+strconv.Itoa(i))
		m.Data = []byte("x")
		if _, err := ajs.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
	}
	<-ajs.PublishAsyncComplete()
	return env, edb
}

func benchRaw(b *testing.B, workers int, tx bool) {
	env, edb := benchSetup(b)
	b.ResetTimer()
	it, err := env.cons.Messages()
	if err != nil {
		b.Fatal(err)
	}
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				msg, err := it.Next()
				if err != nil {
					b.Error(err)
					return
				}
				if tx {
					ctx := context.Background()
					t, err := edb.DB.BeginTx(ctx, nil)
					if err != nil {
						b.Error(err)
						return
					}
					if err := effect(ctx, t, msg); err != nil {
						b.Error(err)
						return
					}
					if err := t.Commit(); err != nil {
						b.Error(err)
						return
					}
				}
				_ = msg.Ack()
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	it.Stop()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func benchInbox(b *testing.B, workers int) {
	env, edb := benchSetup(b)
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		err := effect(ctx, tx, msg)
		return err
	}
	counting, all := adaptertest.CountDown(edb.Inbox, int64(b.N))
	b.ResetTimer()
	s := newSub(b, counting, env.cons, h, natsinbox.Config{Concurrency: workers})
	if err := s.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	<-all
	b.StopTimer()
	stop(b, s)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
