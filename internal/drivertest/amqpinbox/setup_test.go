package amqpinbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

var crash = adaptertest.Crash{Env: "IDEM_AMQPINBOX_CRASH_CHILD", Test: "TestCrashBetweenCommitAndAck"}

func TestMain(m *testing.M) { adaptertest.Main(m, crash) }

type amqpEnv struct {
	conn  *amqp.Connection
	ch    *amqp.Channel
	queue string
}

// newAMQP dials RabbitMQ and declares a queue with a unique name (plus
// args), deleted when the test ends.
func newAMQP(t testing.TB, args amqp.Table) *amqpEnv {
	t.Helper()
	q := adaptertest.NewAMQPQueue(t, args)
	return &amqpEnv{conn: q.Conn, ch: q.Ch, queue: q.Queue}
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
	(&adaptertest.AMQPQueue{Conn: e.conn, Ch: e.ch, Queue: e.queue}).Publish(t, id, body)
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

type effectDB = adaptertest.EffectDB

func newPostgresInbox(t testing.TB) (*effectDB, string) { return adaptertest.NewPostgresInbox(t) }

// effect is the business change: one effects row per handler commit, no
// unique constraint, so a duplicate effect would show.
func effect(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
	return adaptertest.InsertEffect(ctx, tx, d.MessageId, string(d.Body))
}

func newSub(t testing.TB, p inbox.Processor, conn *amqp.Connection, h amqpinbox.Handler, cfg amqpinbox.Config) *amqpinbox.Subscriber {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = adaptertest.QuietLogger()
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
	adaptertest.Stop(t, s, 10*time.Second)
}
