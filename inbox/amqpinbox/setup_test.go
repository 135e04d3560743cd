package amqpinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
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

type amqpEnv struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
}

// newAMQP dials RabbitMQ and declares a queue with a unique name (plus
// args), deleted when the test ends.
func newAMQP(t testing.TB, args amqp.Table) *amqpEnv {
	t.Helper()
	url := testenv.AMQP.Need(t)
	conn, err := amqp.Dial(url)
	if err != nil {
		testenv.Unavailable(t, "RabbitMQ", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	e := &amqpEnv{conn: conn, ch: ch, queue: testenv.Name("idemt")}
	if _, err := ch.QueueDeclare(e.queue, true, false, false, false, args); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	t.Cleanup(func() {
		if c, err := conn.Channel(); err == nil {
			_, _ = c.QueueDelete(e.queue, false, false, false)
			_ = c.Close()
		}
		_ = conn.Close()
	})
	return e
}

// deadLetterQueue declares a fanout exchange bound to a fresh queue.
func (e *amqpEnv) deadLetterQueue(t testing.TB) (exchange, queue string) {
	t.Helper()
	exchange, queue = testenv.Name("idemt-dlx"), testenv.Name("idemt-dlq")
	if err := e.ch.ExchangeDeclare(exchange, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := e.ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.ch.QueueBind(queue, "", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c, err := e.conn.Channel(); err == nil {
			_, _ = c.QueueDelete(queue, false, false, false)
			_ = c.ExchangeDelete(exchange, false, false)
			_ = c.Close()
		}
	})
	return exchange, queue
}

func (e *amqpEnv) publish(t testing.TB, id, body string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conf, err := e.ch.PublishWithDeferredConfirmWithContext(ctx, "", e.queue, true, false, amqp.Publishing{
		MessageId: id, Body: []byte(body), DeliveryMode: amqp.Persistent,
	})
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	if ok, err := conf.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
}

// ready is the number of messages ready in queue (not counting unacked ones).
func (e *amqpEnv) ready(t testing.TB, queue string) int {
	t.Helper()
	c, err := e.conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q, err := c.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect %s: %v", queue, err)
	}
	return q.Messages
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

// effect is the business change: one effects row per handler commit, no
// unique constraint, so a duplicate effect would show.
func effect(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
	_, err := tx.ExecContext(ctx, `INSERT INTO effects (id, body) VALUES ($1, $2)`, d.MessageId, string(d.Body))
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
	p                     amqpinbox.Processor
	processed, duplicates atomic.Int64
	failures              atomic.Int64
}

func (r *recorder) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := r.p.Process(ctx, consumer, id, h)
	switch {
	case err != nil:
		r.failures.Add(1)
	case out == inbox.Processed:
		r.processed.Add(1)
	case out == inbox.Duplicate:
		r.duplicates.Add(1)
	default:
		panic(fmt.Sprintf("unexpected outcome %v", out))
	}
	return out, err
}

func newSub(t testing.TB, p amqpinbox.Processor, conn *amqp.Connection, h amqpinbox.Handler, cfg amqpinbox.Config) *amqpinbox.Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	s, err := amqpinbox.New(p, conn, h, &cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func stop(t testing.TB, s *amqpinbox.Subscriber) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}
