package kafkainbox_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// BenchmarkConsume measures records/s from a topic on kfake (in-process
// Kafka) as one group member:
//
//	raw-commit:     the raw client: PollRecords + CommitRecords per poll, no database
//	raw-tx-commit:  the same + the business transaction per record, sequential
//	                (compare with inbox/partitions=1, also one record at a time)
//	inbox:          the Subscriber: a goroutine per partition, Process (dedup
//	                row + business tx) per record, commit per batch
//
// The inbox DB is PostgreSQL; b.N records with unique IDs are produced first.
func BenchmarkConsume(b *testing.B) {
	b.Run("raw-commit/partitions=4", func(b *testing.B) { benchRaw(b, 4, false) })
	b.Run("raw-tx-commit/partitions=1", func(b *testing.B) { benchRaw(b, 1, true) })
	b.Run("inbox/partitions=1", func(b *testing.B) { benchInbox(b, 1) })
	b.Run("inbox/partitions=4", func(b *testing.B) { benchInbox(b, 4) })
}

func benchSetup(b *testing.B, parts int) ([]string, *effectDB) {
	brokers := newCluster(b, int32(parts), "orders")
	edb, _ := newPostgresInbox(b)
	edb.DB.SetMaxIdleConns(8)
	recs := make([]*kgo.Record, b.N)
	for i := range recs {
		recs[i] = record("orders", int32(i%parts), "m-"+strconv.Itoa(i), "x")
	}
	produce(b, brokers, recs...)
	return brokers, edb
}

func benchRaw(b *testing.B, parts int, tx bool) {
	brokers, edb := benchSetup(b, parts)
	b.ResetTimer()
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("orders"), kgo.DisableAutoCommit()}, fastGroup...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for n := 0; n < b.N; {
		fs := cl.PollRecords(ctx, 500)
		recs := fs.Records()
		for _, r := range recs {
			if tx {
				t, err := edb.DB.BeginTx(ctx, nil)
				if err == nil {
					err = effect(ctx, t, r)
				}
				if err == nil {
					err = t.Commit()
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		}
		if len(recs) > 0 {
			if err := cl.CommitRecords(ctx, recs...); err != nil {
				b.Fatal(err)
			}
		}
		n += len(recs)
	}
	b.StopTimer()
	cl.Close()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

func benchInbox(b *testing.B, parts int) {
	brokers, edb := benchSetup(b, parts)
	p, all := adaptertest.CountDown(edb.Inbox, int64(b.N))
	b.ResetTimer()
	s := newSub(b, p, effect, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	<-all
	b.StopTimer()
	stop(b, s)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}
