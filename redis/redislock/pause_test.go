package redislock

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
)

const pauseEnv = "IDEM_REDISLOCK_PAUSE_CHILD"

// pauseTTL is the lock TTL of the paused child.
// 3s: the new holder's renewals (every second, 1.7s of slack each) keep it
// valid through the pause on a loaded machine.
const pauseTTL = 3 * time.Second

// pauseChild is the child process of TestPausedHolderValid: it takes the
// lock, reports its pid and fence, then checks Lease.Valid every
// millisecond. When it finds a gap longer than the TTL between two checks
// (it was stopped), it reports what the first check after the gap said, and
// exits.
func pauseChild() bool {
	addr := os.Getenv(pauseEnv)
	if addr == "" {
		return false
	}
	l, err := childLocker(addr, &Config{Prefix: os.Getenv(pauseEnv + "_PREFIX"), TTL: pauseTTL})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	ls, err := l.Acquire(context.Background(), "paused")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	// last is read before the line goes out: the parent stops this process
	// as soon as it reads it, possibly before the next statement.
	last := time.Now()
	fmt.Printf("held=%d %d\n", os.Getpid(), ls.Fence())
	paused := false // a pause was seen; the next check to start reports
	for {
		time.Sleep(time.Millisecond)
		before := time.Now()
		err := ls.Valid()
		after := time.Now()
		if paused || before.Sub(last) > pauseTTL {
			// This check started after the pause.
			fmt.Printf("resumed=%v valid=%v\n", after.Sub(last).Round(time.Millisecond), err)
			return true
		}
		if after.Sub(before) > pauseTTL {
			// Stopped inside this check: its answer may predate the pause
			// (either answer is right). The next check reports.
			paused = true
			last = before
			continue
		}
		if err != nil {
			fmt.Printf("resumed=never valid=%v\n", err)
			return true
		}
		last = after
	}
}

// A holder process is stopped (SIGSTOP) for longer than its TTL, which
// expires its lock; another holder takes it; then the first is continued
// (SIGCONT). Its very first Valid check after the pause must report the
// lease expired, before the watchdog (whose timer was also stopped) has had
// to run, and without a call to Redis.
func TestPausedHolderValid(t *testing.T) {
	t.Parallel()
	l, rdb := newLocker(t, &Config{TTL: pauseTTL})
	ctx := ctxT(t, 60*time.Second)
	child := testenv.StartChild(t, []string{pauseEnv + "=" + rdb.Options().Addr, pauseEnv + "_PREFIX=" + l.cfg.Prefix, childClientEnv + "=" + suiteClient}, "-test.run=^$")
	var (
		pid        int
		childFence lock.Fence
	)
	if _, err := fmt.Sscanf(child.Line("held=", 30*time.Second), "%d %d", &pid, &childFence); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitStopped(t, pid)

	// The stopped child cannot renew: its key expires, a new holder gets it.
	var b lock.Lease
	for {
		ls, err := l.TryAcquire(ctx, "paused")
		if err == nil {
			b = ls
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the stopped child's lock never expired: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if b.Fence() <= childFence {
		t.Fatalf("new fence %d not above the child's %d", b.Fence(), childFence)
	}
	// Keep it stopped a TTL longer, so the child sees a gap longer than the
	// TTL whatever moment of its renewal cycle the stop hit.
	time.Sleep(pauseTTL)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	line := child.Line("resumed=", 30*time.Second)
	if strings.HasPrefix(line, "never") {
		t.Fatalf("the child's lease went invalid without a pause: %s", line)
	}
	if !strings.Contains(line, "valid="+"redislock:") || !strings.Contains(line, lock.ErrExpired.Error()) {
		t.Fatalf("first Valid after the pause: %s; want an expired lease", line)
	}
	t.Logf("child: resumed=%s", line)
	if err := b.Valid(); err != nil {
		t.Fatalf("new holder: %v", err)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitStopped waits until the process is in the stopped state.
func waitStopped(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		// pid (comm) state ...; comm may contain spaces, the state follows the last ')'.
		s := string(stat)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] == 'T' {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}
