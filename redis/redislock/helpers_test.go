package redislock

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	_ "modernc.org/sqlite" // the fenced table of the fencing tests

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
)

// accounts is the storage side of the fencing tests: a SQLite table whose
// rows remember the fence of their last writer.
var accounts = lock.FencedTable{Table: "accounts", KeyColumn: "id", Placeholders: lock.Question}

func fencedSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+testenv.SQLitePath(t)+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, q := range []string{
		`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, fence INTEGER NOT NULL DEFAULT 0)`,
		`INSERT INTO accounts (id, balance) VALUES (7, 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func balance(t *testing.T, db *sql.DB, id int) int {
	t.Helper()
	var b int
	if err := db.QueryRow(`SELECT balance FROM accounts WHERE id = ?`, id).Scan(&b); err != nil {
		t.Fatal(err)
	}
	return b
}

const crashEnv = "IDEM_REDISLOCK_CRASH_CHILD"

// crashChild is the child process of TestCrashedHolderLockExpires: it takes
// the lock, reports its fence on stdout and holds the lock (the watchdog
// renewing it) until it is killed.
func crashChild() bool {
	addr := os.Getenv(crashEnv)
	if addr == "" {
		return false
	}
	l, err := childLocker(addr, &Config{Prefix: os.Getenv(crashEnv + "_PREFIX"), TTL: time.Second})
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
	time.Sleep(1500 * time.Millisecond) // longer than the child's 1s TTL: only renewals keep it
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
