package natsinbox_test

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
	"github.com/idemkit/idem/internal/testenv"
)

const childEnv = "IDEM_NATSINBOX_CRASH_CHILD"

// killAfterCommit wraps the inbox: once Process has committed, it tells the
// parent on stdout and then hangs, so the ack is never sent; the parent
// SIGKILLs the process in exactly that window.
type killAfterCommit struct{ p *inbox.Inbox }

func (k killAfterCommit) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := k.p.Process(ctx, consumer, id, h)
	if err == nil && out == inbox.Processed {
		fmt.Printf("COMMITTED %s\n", id)
		select {} // wait for SIGKILL
	}
	return out, err
}

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
	db, err := sql.Open("pgx", os.Getenv("IDEM_CHILD_PG"))
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	s := newSub(t, killAfterCommit{ib}, cons, effect, natsinbox.Config{})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Minute) // the parent kills us long before
	t.Fatal("child was not killed")
}

// A consumer process is SIGKILLed after its transaction committed and
// before it acked. The broker redelivers to a new consumer, which acks the
// message as a duplicate without running the handler: the effect happened
// once.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		runCrashChild(t)
		return
	}
	t.Parallel()
	env := newNATS(t, 500*time.Millisecond)
	edb, dsn := newPostgresInbox(t)
	env.publish(t, "order-crash", "pay 30")

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBetweenCommitAndAck$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1",
		"IDEM_CHILD_NATS="+testenv.NATS.DSN(), "IDEM_CHILD_STREAM="+env.stream, "IDEM_CHILD_PG="+dsn)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	committed := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "COMMITTED "); ok {
				committed <- id
				return
			}
		}
		close(committed)
	}()
	select {
	case id, ok := <-committed:
		if !ok || id != "order-crash" {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			t.Fatalf("child ended without committing (id %q)", id)
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatal("child did not commit in time")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if rows, _ := edb.counts(t); rows != 1 {
		t.Fatalf("after the crash effects = %d, want 1 (the child committed)", rows)
	}
	if env.settled(t) {
		t.Fatal("message settled although the child never acked")
	}

	rec := &recorder{p: edb.ib}
	var handlerRuns int
	h := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		handlerRuns++
		return effect(ctx, tx, msg)
	}
	s := newSub(t, rec, env.cons, h, natsinbox.Config{})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the redelivery to be acked", 20*time.Second, func() bool { return rec.duplicates.Load() == 1 && env.settled(t) })
	stop(t, s)
	rows, _ := edb.counts(t)
	if rows != 1 || handlerRuns != 0 || rec.processed.Load() != 0 {
		t.Fatalf("effects=%d handler runs=%d processed=%d; want 1, 0, 0", rows, handlerRuns, rec.processed.Load())
	}
}
