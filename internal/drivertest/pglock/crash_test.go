package pglock_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

const crashEnv = "IDEM_PGLOCK_CRASH_CHILD"

// crashChild is the child process of TestCrashedHolderFreesLock: it takes the
// lock, reports its fence and holds the lock until it is killed.
func crashChild() bool {
	dsn := os.Getenv(crashEnv)
	if dsn == "" {
		return false
	}
	fail := func(err error) {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		fail(err)
	}
	l, err := pglock.New(db, &pglock.Config{Namespace: os.Getenv(crashEnv + "_NS")})
	if err != nil {
		fail(err)
	}
	ls, err := l.Acquire(context.Background(), "crash")
	if err != nil {
		fail(err)
	}
	fmt.Printf("fence=%d\n", ls.Fence())
	time.Sleep(time.Hour)
	return true
}

// A holder process killed with SIGKILL takes its session with it: the
// server frees the session lock as soon as it sees the connection close, and
// the next holder gets a larger fence.
func TestCrashedHolderFreesLock(t *testing.T) {
	t.Parallel()
	l, _, dsn := setup(t, 2, nil)
	ctx := ctxT(t, 30*time.Second)
	child := testenv.StartChild(t, []string{crashEnv + "=" + dsn, crashEnv + "_NS=" + namespaceOf(l)}, "-test.run=^$")
	line := child.Line("fence=", 30*time.Second)
	var childFence lock.Fence
	if _, err := fmt.Sscanf(line, "%d", &childFence); err != nil {
		t.Fatal(err)
	}
	if _, err := l.TryAcquire(ctx, "crash"); err == nil {
		t.Fatal("lock free while the child holds it")
	}
	child.Kill()
	ls := mustAcquire(t, l, ctx, "crash")
	if ls.Fence() <= childFence {
		t.Fatalf("fence %d after the crashed holder's %d", ls.Fence(), childFence)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
