package amqpinbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// A handler that panics is a failure of that message, not a dead process:
// the panic is recovered, the message is retried and, on its
// MaxFailures-th delivery, dead-lettered with the panic as the reason;
// the next message is applied.
func TestHandlerPanicIsAFailure(t *testing.T) {
	t.Parallel()
	env := newAMQP(t, nil)
	dlx, dlq := env.deadLetterQueue(t)
	edb, _ := newPostgresInbox(t)
	var panics, good atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if string(d.Body) == "poison" {
			panics.Add(1)
			panic("nil map in the handler")
		}
		good.Add(1)
		return effect(ctx, tx, d)
	}
	env.publish(t, "bad-1", "poison")
	env.publish(t, "good-1", "fine")
	s := newSub(t, edb.Inbox, env.conn, h, amqpinbox.Config{
		Queue: env.queue, MaxFailures: 3, DeadLetterExchange: dlx,
		BackoffFunc: func(int) time.Duration { return time.Millisecond },
	})
	adaptertest.WaitFor(t, "the panicking message in the DLQ", 20*time.Second, func() bool { return env.ready(t, dlq) == 1 })
	adaptertest.WaitFor(t, "the good message applied", 20*time.Second, func() bool { return good.Load() == 1 })
	stop(t, s)
	d, ok, err := env.ch.Get(dlq, true)
	if err != nil || !ok {
		t.Fatalf("get from DLQ: %v %v", ok, err)
	}
	reason, _ := d.Headers[amqpinbox.ErrorHeader].(string)
	if d.MessageId != "bad-1" || !strings.Contains(reason, "the handler panicked: nil map in the handler") {
		t.Fatalf("dead letter id=%q reason=%q", d.MessageId, reason)
	}
	rows, _ := edb.Counts(t)
	if panics.Load() != 3 || rows != 1 {
		t.Fatalf("panics=%d effects=%d; want 3, 1", panics.Load(), rows)
	}
}
