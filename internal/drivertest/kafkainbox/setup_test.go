package kafkainbox_test

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

var crash = adaptertest.Crash{Env: "IDEM_KAFKAINBOX_CRASH_CHILD", Test: "TestCrashBetweenCommitAndOffsetCommit"}

func TestMain(m *testing.M) { adaptertest.Main(m, crash) }

// fastGroup makes joins, leaves and dead-member detection quick on kfake.
// The session timeout is what a live member must not miss heartbeats for:
// with 1s a loaded machine can stall a member that long; kfake then
// expires it and its partitions are lost (not revoked: uncommitted records
// are read again, a parked record is tried again), which breaks the tests
// that count handler runs and duplicates. 5s keeps a crashed member's
// detection well within the crash test's wait.
var fastGroup = []kgo.Opt{
	kgo.HeartbeatInterval(100 * time.Millisecond),
	kgo.SessionTimeout(5 * time.Second),
	kgo.RebalanceTimeout(2 * time.Second),
	kgo.FetchMaxWait(100 * time.Millisecond),
}

// newCluster starts an in-process Kafka (kfake) with the given topics.
func newCluster(t testing.TB, partitions int32, topics ...string) []string {
	return adaptertest.NewKafka(t, partitions, topics...)
}

// produce writes records (ID header = id) to explicit partitions.
func produce(t testing.TB, brokers []string, recs ...*kgo.Record) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
}

func record(topic string, partition int32, id, value string) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: partition, Value: []byte(value)}
	if id != "" {
		r.Headers = []kgo.RecordHeader{{Key: kafkainbox.DefaultMessageIDHeader, Value: []byte(id)}}
	}
	return r
}

type effectDB = adaptertest.EffectDB

func newPostgresInbox(t testing.TB) (*effectDB, string) { return adaptertest.NewPostgresInbox(t) }

func recordID(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == kafkainbox.DefaultMessageIDHeader {
			return string(h.Value)
		}
	}
	return r.Topic + "/" + strconv.Itoa(int(r.Partition)) + "/" + strconv.FormatInt(r.Offset, 10)
}

// effect is the business change: one effects row per handler commit.
func effect(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
	return adaptertest.InsertEffect(ctx, tx, recordID(r), string(r.Value))
}

func newSub(t testing.TB, p inbox.Processor, h kafkainbox.Handler, cfg kafkainbox.Config) *kafkainbox.Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = adaptertest.QuietLogger()
	}
	cfg.ClientOpts = append(append([]kgo.Opt{}, fastGroup...), cfg.ClientOpts...)
	s, err := kafkainbox.New(p, h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func stop(t testing.TB, s *kafkainbox.Subscriber) {
	t.Helper()
	adaptertest.Stop(t, s, 20*time.Second)
}
