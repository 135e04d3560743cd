package kafkainbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
	"github.com/idemkit/idem/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(m.Run()) // a crash-test child is SIGKILLed; goleak is moot
	}
	goleak.VerifyTestMain(m)
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

// fastGroup makes joins, leaves and dead-member detection quick on kfake.
var fastGroup = []kgo.Opt{
	kgo.HeartbeatInterval(100 * time.Millisecond),
	kgo.SessionTimeout(time.Second),
	kgo.RebalanceTimeout(2 * time.Second),
	kgo.FetchMaxWait(100 * time.Millisecond),
}

// newCluster starts an in-process Kafka (kfake) with the given topics.
func newCluster(t testing.TB, partitions int32, topics ...string) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topics...),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
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

func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type effectDB struct {
	db *sql.DB
	ib *inbox.Inbox
}

func newPostgresInbox(t testing.TB) (*effectDB, string) {
	t.Helper()
	db, dsn := testenv.PostgresDB(t)
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id VARCHAR(255) NOT NULL, body VARCHAR(255) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &effectDB{db: db, ib: ib}, dsn
}

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
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, body) VALUES ($1, $2)`, recordID(r), string(r.Value))
	return err
}

func (e *effectDB) counts(t testing.TB) (rows, distinct int) {
	t.Helper()
	if err := e.db.QueryRow(`SELECT count(*), count(DISTINCT id) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

type recorder struct {
	p                     kafkainbox.Processor
	processed, duplicates atomic.Int64
	mu                    sync.Mutex
	dupIDs                []string
}

func (r *recorder) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := r.p.Process(ctx, consumer, id, h)
	switch {
	case err != nil:
	case out == inbox.Processed:
		r.processed.Add(1)
	case out == inbox.Duplicate:
		r.duplicates.Add(1)
		r.mu.Lock()
		r.dupIDs = append(r.dupIDs, id)
		r.mu.Unlock()
	default:
		panic(fmt.Sprintf("unexpected outcome %v", out))
	}
	return out, err
}

func newSub(t testing.TB, p kafkainbox.Processor, h kafkainbox.Handler, cfg kafkainbox.Config) *kafkainbox.Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
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
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}
