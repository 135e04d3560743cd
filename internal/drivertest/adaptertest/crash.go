package adaptertest

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
)

// Crash is the commit-then-SIGKILL test of one adapter: Test is the name of
// the test function, which runs as the parent and, re-executed with Env set,
// as the child consumer. The child consumes through KillAfterCommit and
// announces its commit; the parent kills it in that instant, before the ack
// (or offset commit) can happen, and then checks that the redelivery is a
// Duplicate.
type Crash struct {
	Env  string // e.g. IDEM_NATSINBOX_CRASH_CHILD
	Test string // e.g. TestCrashBetweenCommitAndAck
}

// IsChild reports whether this process is the child.
func (c Crash) IsChild() bool { return os.Getenv(c.Env) != "" }

// pgEnv carries the parent's PostgreSQL DSN (its private schema) to the child.
const pgEnv = "IDEM_CHILD_PG"

// KillAfterCommit runs the child with env (the broker coordinates, as
// NAME=value) and the inbox database pgDSN, waits until it has committed
// message wantID, and SIGKILLs it before it can ack.
func (c Crash) KillAfterCommit(t *testing.T, pgDSN, wantID string, env ...string) {
	t.Helper()
	env = append([]string{c.Env + "=1", pgEnv + "=" + pgDSN}, env...)
	id := testenv.KillAtLine(t, "COMMITTED ", 30*time.Second, env, "-test.run=^"+c.Test+"$", "-test.count=1")
	if id != wantID {
		t.Fatalf("child committed %q, want %q", id, wantID)
	}
}

// Start runs the child with env and the inbox database pgDSN, like
// KillAfterCommit, and returns it: the parent reads its lines and kills it
// when it chooses.
func (c Crash) Start(t *testing.T, pgDSN string, env ...string) *testenv.Child {
	t.Helper()
	env = append([]string{c.Env + "=1", pgEnv + "=" + pgDSN}, env...)
	return testenv.StartChild(t, env, "-test.run=^"+c.Test+"$", "-test.count=1")
}

// ChildInbox is the child's inbox, on the parent's database.
func (c Crash) ChildInbox(t *testing.T) *inbox.Inbox {
	t.Helper()
	db, err := sql.Open("pgx", os.Getenv(pgEnv))
	if err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	return ib
}

// KillAfterCommit wraps the child's inbox: once Process has committed, it
// tells the parent on stdout ("COMMITTED <id>") and hangs, so the adapter
// never acks; the parent SIGKILLs the process in exactly that window.
type KillAfterCommit struct{ P inbox.Processor }

// Process forwards to k.P, and never returns after a commit.
func (k KillAfterCommit) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := k.P.Process(ctx, consumer, id, h)
	if err == nil && out == inbox.Processed {
		fmt.Printf("COMMITTED %s\n", id)
		select {} // wait for SIGKILL
	}
	return out, err
}

// Linger keeps the child alive for the parent's SIGKILL, and fails it if
// the kill never comes.
func (c Crash) Linger(t *testing.T) {
	time.Sleep(time.Minute) // the parent kills us long before
	t.Fatal("child was not killed")
}
