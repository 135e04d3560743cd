package natsinbox_test

import (
	"context"
	"database/sql"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/drivertest/adaptertest"
	"github.com/idemkit/idem/internal/testenv"
)

// runCrashChild is the consumer process of TestCrashBetweenCommitAndAck.
func runCrashChild(t *testing.T) {
	nc, err := nats.Connect(os.Getenv("IDEM_CHILD_NATS"))
	if err != nil {
		t.Fatal(err)
	}
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	cons, err := js.Consumer(ctx, os.Getenv("IDEM_CHILD_STREAM"), "worker")
	if err != nil {
		t.Fatal(err)
	}
	ib := crash.ChildInbox(t)
	s := newSub(t, adaptertest.KillAfterCommit{P: ib}, cons, effect, natsinbox.Config{})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	crash.Linger(t)
}

// A consumer process is SIGKILLed after its transaction committed and
// before it acked. The broker redelivers to a new consumer, which acks the
// message as a duplicate without running the handler: the effect happened
// once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	if crash.IsChild() {
		runCrashChild(t)
		return
	}
	t.Parallel()
	env := newNATS(t, 500*time.Millisecond)
	edb, dsn := newPostgresInbox(t)
	env.publish(t, "order-crash", "pay 30")

	crash.KillAfterCommit(t, dsn, "order-crash", "IDEM_CHILD_NATS="+testenv.NATS.DSN(), "IDEM_CHILD_STREAM="+env.stream)
	if rows, _ := edb.Counts(t); rows != 1 {
		t.Fatalf("after the crash effects = %d, want 1 (the child committed)", rows)
	}
	if env.settled(t) {
		t.Fatal("message settled although the child never acked")
	}

	rec := &adaptertest.Recorder{P: edb.Inbox}
	var handlerRuns int
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		handlerRuns++
		return effect(ctx, tx, msg)
	}
	s := newSub(t, rec, env.cons, h, natsinbox.Config{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	adaptertest.WaitFor(t, "the redelivery to be acked", 20*time.Second, func() bool { return rec.Duplicates.Load() == 1 && env.settled(t) })
	stop(t, s)
	rows, _ := edb.Counts(t)
	if rows != 1 || handlerRuns != 0 || rec.Processed.Load() != 0 {
		t.Fatalf("effects=%d handler runs=%d processed=%d; want 1, 0, 0", rows, handlerRuns, rec.Processed.Load())
	}
}
