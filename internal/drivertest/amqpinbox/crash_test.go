package amqpinbox_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

func runCrashChild(t *testing.T) {
	conn, err := amqp.Dial(testenv.AMQP.DSN())
	if err != nil {
		t.Fatal(err)
	}
	ib := crash.ChildInbox(t)
	newSub(t, adaptertest.KillAfterCommit{P: ib}, conn, effect, amqpinbox.Config{Queue: os.Getenv("IDEM_CHILD_QUEUE")})
	crash.Linger(t)
}

// A consumer process is SIGKILLed after its transaction committed and before
// it acked. RabbitMQ requeues the unacked delivery when the connection
// drops; a new consumer acks it as a duplicate without running the handler.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	if crash.IsChild() {
		runCrashChild(t)
		return
	}
	t.Parallel()
	env := newAMQP(t, nil)
	edb, dsn := newPostgresInbox(t)
	env.publish(t, "order-crash", "pay 30")

	crash.KillAfterCommit(t, dsn, "order-crash", "IDEM_CHILD_QUEUE="+env.queue)
	if rows, _ := edb.Counts(t); rows != 1 {
		t.Fatalf("after the crash effects = %d, want 1 (the child committed)", rows)
	}

	rec := &adaptertest.Recorder{P: edb.Inbox}
	var handlerRuns int
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		handlerRuns++
		return effect(ctx, tx, d)
	}
	s := newSub(t, rec, env.conn, h, amqpinbox.Config{Queue: env.queue})
	adaptertest.WaitFor(t, "the redelivery to be acked as a duplicate", 20*time.Second, func() bool { return rec.Duplicates.Load() == 1 })
	stop(t, s)
	rows, _ := edb.Counts(t)
	if rows != 1 || handlerRuns != 0 || rec.Processed.Load() != 0 || env.ready(t, env.queue) != 0 {
		t.Fatalf("effects=%d handler runs=%d processed=%d ready=%d; want 1, 0, 0, 0", rows, handlerRuns, rec.Processed.Load(), env.ready(t, env.queue))
	}
}
