package natsinbox_test

import (
	"context"
	"database/sql"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
)

// A handler that panics is a failure of that message, not a dead process:
// the panic is recovered, the message is retried and, on its
// MaxFailures-th delivery, dead-lettered with the panic as the reason;
// the next message is applied.
func TestHandlerPanicIsAFailure(t *testing.T) {
	t.Parallel()
	env := newNATS(t, 5*time.Second)
	dlq := env.deadLetters(t)
	edb, _ := newPostgresInbox(t)
	var panics, good atomic.Int64
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		if string(msg.Data()) == "poison" {
			panics.Add(1)
			panic("nil map in the handler")
		}
		good.Add(1)
		return effect(ctx, tx, msg)
	}
	s := newSub(t, edb.Inbox, env.cons, h, natsinbox.Config{
		MaxFailures: 3, DeadLetterSubject: dlq, JetStream: env.js,
		BackoffFunc: func(int) time.Duration { return 20 * time.Millisecond },
	})
	env.publish(t, "bad-1", "poison")
	env.publish(t, "good-1", "fine")
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "the panicking message dead-lettered and the good one applied", 20*time.Second, func() bool {
		return len(env.deadLettered(t, dlq)) == 1 && good.Load() >= 1 && env.settled(t)
	})
	stop(t, s)
	rows, _ := edb.Counts(t)
	if panics.Load() != 3 || good.Load() != 1 || rows != 1 {
		t.Fatalf("panics=%d good=%d effects=%d; want 3, 1, 1", panics.Load(), good.Load(), rows)
	}
	if reason := env.deadLettered(t, dlq)[0].Header.Get(natsinbox.ErrorHeader); !strings.Contains(reason, "the handler panicked: nil map in the handler") {
		t.Fatalf("dead-letter reason %q", reason)
	}
}
