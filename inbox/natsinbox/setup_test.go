package natsinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A crash-test child is SIGKILLed by its parent; goleak is moot.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

// idHeader carries the business message ID in the tests. It is deliberately
// not Nats-Msg-Id, so the stream's own duplicate window does not swallow the
// duplicates the tests publish on purpose.
const idHeader = "Idem-Message-Id"

// quietLogger drops Debug/Info; failures the tests provoke still show at Warn
// with -v only through t.Log-less stderr, which is acceptable noise.
func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError + 4}))
}

type natsEnv struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	stream string
	cons   jetstream.Consumer
}

// newNATS creates a memory stream and a durable pull consumer with unique
// names, deleted when the test ends.
func newNATS(t testing.TB, ackWait time.Duration) *natsEnv {
	t.Helper()
	url := testenv.NATS.Need(t)
	nc, err := nats.Connect(url)
	if err != nil {
		testenv.Unavailable(t, "NATS", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	name := testenv.Name("IDEMT")
	st, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, name)
		nc.Close()
	})
	cons, err := st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "worker", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: ackWait, MaxDeliver: -1, MaxAckPending: 10000,
	})
	if err != nil {
		t.Fatalf("create consumer: %v", err)
	}
	return &natsEnv{nc: nc, js: js, stream: name, cons: cons}
}

func (e *natsEnv) publish(t testing.TB, id string, body string) {
	t.Helper()
	m := nats.NewMsg(e.stream + ".orders")
	if id != "" {
		m.Header.Set(idHeader, id)
	}
	m.Data = []byte(body)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.js.PublishMsg(ctx, m); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// settled reports whether every message of the stream has been acked or
// terminated and none is waiting or in flight.
func (e *natsEnv) settled(t testing.TB) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	info, err := e.cons.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0 &&
		info.AckFloor.Stream == info.Delivered.Stream
}

// waitFor polls cond until it holds or the deadline passes.
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

// effectDB is the inbox database plus an effects table: one row per handler
// commit, with no unique constraint, so a duplicate effect would show.
type effectDB struct {
	db *sql.DB
	ib *inbox.Inbox
}

func newPostgresInbox(t testing.TB) (*effectDB, string) {
	t.Helper()
	db, dsn := testenv.PostgresDB(t)
	return setupInbox(t, db, inbox.Postgres), dsn
}

func openInbox(t testing.TB, driver, dsn string, d inbox.Dialect) *effectDB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ib, err := inbox.New(db, &inbox.Config{Dialect: d})
	if err != nil {
		t.Fatal(err)
	}
	return &effectDB{db: db, ib: ib}
}

func setupInbox(t testing.TB, db *sql.DB, d inbox.Dialect) *effectDB {
	t.Helper()
	ib, err := inbox.New(db, &inbox.Config{Dialect: d})
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
	return &effectDB{db: db, ib: ib}
}

// effect is the business change: insert one effects row in the inbox tx.
func effect(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, body) VALUES ($1, $2)`, msg.Headers().Get(idHeader), string(msg.Data()))
	return err
}

func (e *effectDB) counts(t testing.TB) (rows, distinct int) {
	t.Helper()
	if err := e.db.QueryRow(`SELECT count(*), count(DISTINCT id) FROM effects`).Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// recorder is a Processor that forwards to the real inbox and counts
// outcomes, so tests can see Duplicate decisions.
type recorder struct {
	p                     *inbox.Inbox
	processed, duplicates atomic.Int64
	failures              atomic.Int64
	mu                    sync.Mutex
	ids                   []string
}

func (r *recorder) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := r.p.Process(ctx, consumer, id, h)
	switch {
	case err != nil:
		r.failures.Add(1)
	case out == inbox.Processed:
		r.processed.Add(1)
		r.mu.Lock()
		r.ids = append(r.ids, id)
		r.mu.Unlock()
	case out == inbox.Duplicate:
		r.duplicates.Add(1)
	default:
		panic(fmt.Sprintf("unexpected outcome %v", out))
	}
	return out, err
}

// countingProcessor closes done when target messages have been processed.
type countingProcessor struct {
	p      natsinbox.Processor
	n      *atomic.Int64
	target int64
	done   chan struct{}
}

func (c *countingProcessor) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := c.p.Process(ctx, consumer, id, h)
	if err == nil && c.n.Add(1) == c.target {
		close(c.done)
	}
	return out, err
}
