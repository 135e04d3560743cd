package redislock

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
)

const crashEnv = "IDEM_REDISLOCK_CRASH_CHILD"

// crashTTL is the crash child's lock TTL: long enough that a loaded machine
// cannot make the live child miss a renewal (1s did: 567ms of slack).
const crashTTL = 3 * time.Second

// crashChild is the child process of TestCrashedHolderLockExpires: it takes
// the lock, reports its fence on stdout and holds the lock (the watchdog
// renewing it) until it is killed.
func crashChild() bool {
	addr := os.Getenv(crashEnv)
	if addr == "" {
		return false
	}
	l, err := childLocker(addr, &Config{Prefix: os.Getenv(crashEnv + "_PREFIX"), TTL: crashTTL})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	ls, err := l.Acquire(context.Background(), "crash")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	fmt.Printf("fence=%d\n", ls.Fence())
	time.Sleep(time.Hour)
	return true
}

// A holder process killed with SIGKILL never releases: its lock stays while
// its last renewal lasts, then expires, and the next holder gets a larger
// fence.
func TestCrashedHolderLockExpires(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, nil)
	ctx := ctxT(t, 30*time.Second)
	child := testenv.StartChild(t, []string{crashEnv + "=" + rdb.Options().Addr, crashEnv + "_PREFIX=" + l.cfg.Prefix, childClientEnv + "=" + suiteClient}, "-test.run=^$")
	line := child.Line("fence=", 30*time.Second)
	var childFence lock.Fence
	if _, err := fmt.Sscanf(line, "%d", &childFence); err != nil {
		t.Fatal(err)
	}
	time.Sleep(crashTTL * 3 / 2) // longer than the child's TTL: only renewals keep it
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
