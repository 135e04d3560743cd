package amqpinbox_test

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

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
	"github.com/idemkit/idem/internal/testenv"
)

const childEnv = "IDEM_AMQPINBOX_CRASH_CHILD"

// killAfterCommit wraps the inbox: once Process has committed, it tells the
// parent on stdout and hangs, so the ack is never sent; the parent SIGKILLs
// the process in exactly that window.
type killAfterCommit struct{ p *inbox.Inbox }

func (k killAfterCommit) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := k.p.Process(ctx, consumer, id, h)
	if err == nil && out == inbox.Processed {
		fmt.Printf("COMMITTED %s\n", id)
		select {} // wait for SIGKILL
	}
	return out, err
}

func runCrashChild(t *testing.T) {
	conn, err := amqp.Dial(testenv.AMQP.DSN())
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
	newSub(t, killAfterCommit{ib}, conn, effect, amqpinbox.Config{Queue: os.Getenv("IDEM_CHILD_QUEUE")})
	time.Sleep(time.Minute) // the parent kills us long before
	t.Fatal("child was not killed")
}

// A consumer process is SIGKILLed after its transaction committed and before
// it acked. RabbitMQ requeues the unacked delivery when the connection
// drops; a new consumer acks it as a duplicate without running the handler.
func TestCrashBetweenCommitAndAck(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		runCrashChild(t)
		return
	}
	t.Parallel()
	env := newAMQP(t, nil)
	edb, dsn := newPostgresInbox(t)
	env.publish(t, "order-crash", "pay 30")

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBetweenCommitAndAck$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", "IDEM_CHILD_QUEUE="+env.queue, "IDEM_CHILD_PG="+dsn)
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

	rec := &recorder{p: edb.ib}
	var handlerRuns int
	h := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		handlerRuns++
		return effect(ctx, tx, d)
	}
	s := newSub(t, rec, env.conn, h, amqpinbox.Config{Queue: env.queue})
	waitFor(t, "the redelivery to be acked as a duplicate", 20*time.Second, func() bool { return rec.duplicates.Load() == 1 })
	stop(t, s)
	rows, _ := edb.counts(t)
	if rows != 1 || handlerRuns != 0 || rec.processed.Load() != 0 || env.ready(t, env.queue) != 0 {
		t.Fatalf("effects=%d handler runs=%d processed=%d ready=%d; want 1, 0, 0, 0", rows, handlerRuns, rec.processed.Load(), env.ready(t, env.queue))
	}
}
