package kafkainbox_test

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

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
)

const childEnv = "IDEM_KAFKAINBOX_CRASH_CHILD"

// killAfterCommit wraps the inbox: once Process has committed, it tells the
// parent on stdout and hangs, so the offset is never committed; the parent
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

func runCrashChild(t *testing.T) {
	db, err := sql.Open("pgx", os.Getenv("IDEM_CHILD_PG"))
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	newSub(t, killAfterCommit{ib}, effect, kafkainbox.Config{
		Brokers: strings.Split(os.Getenv("IDEM_CHILD_BROKERS"), ","), Group: "g", Topics: []string{"orders"},
	})
	time.Sleep(time.Minute) // the parent kills us long before
	t.Fatal("child was not killed")
}

// A consumer process (talking to this test's in-process kfake over TCP) is
// SIGKILLed after its transaction committed and before the offset commit.
// Once the dead member's session expires, a new member reads the record
// again and the inbox reports it as a duplicate: the effect happened once.
func TestCrashBetweenCommitAndOffsetCommit(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		runCrashChild(t)
		return
	}
	t.Parallel()
	brokers := newCluster(t, 1, "orders")
	edb, dsn := newPostgresInbox(t)
	produce(t, brokers, record("orders", 0, "order-crash", "pay 30"))

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashBetweenCommitAndOffsetCommit$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", "IDEM_CHILD_BROKERS="+strings.Join(brokers, ","), "IDEM_CHILD_PG="+dsn)
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
	h := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error { handlerRuns++; return effect(ctx, tx, r) }
	s := newSub(t, rec, h, kafkainbox.Config{Brokers: brokers, Group: "g", Topics: []string{"orders"}})
	waitFor(t, "the record to be read again as a duplicate", 30*time.Second, func() bool { return rec.duplicates.Load() == 1 })
	stop(t, s)
	rows, _ := edb.counts(t)
	if rows != 1 || handlerRuns != 0 || rec.processed.Load() != 0 {
		t.Fatalf("effects=%d handler runs=%d processed=%d; want 1, 0, 0", rows, handlerRuns, rec.processed.Load())
	}
}
