package redislock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/redislock"
	"github.com/redis/go-redis/v9"
)

// A private Redis is restarted from an older RDB snapshot (SAVE, more
// acquisitions, SIGKILL, restart: the server loads the old dump.rdb, as a
// Debian redis-server with its default "save" lines would after a crash).
// The restored fence counter is behind the fences handed out after the
// snapshot, one of them to a holder that is still alive. The next
// acquisition's fence must be above every fence ever issued, so that the
// live old holder's fenced writes are refused and the new holder's accepted.
func TestFenceAfterRestartFromOlderSnapshot(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	l := lockerOn(t, rdb, &redislock.Config{TTL: 5 * time.Second})
	ctx := ctxT(t, 60*time.Second)
	db := fencedSQLite(t)

	var issued []lock.Fence
	cycle := func() {
		ls := mustAcquire(t, l, ctx, "acct:7")
		issued = append(issued, ls.Fence())
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		cycle()
	}
	if err := rdb.Save(ctx).Err(); err != nil {
		t.Fatalf("SAVE: %v", err)
	}
	for range 3 {
		cycle()
	}
	old := mustAcquire(t, l, ctx, "acct:7") // alive across the restore
	issued = append(issued, old.Fence())
	if err := accounts.Update(ctx, db, 7, old.Fence(), "balance = ?", 1); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	srv.Start() // loads the dump taken before the last four acquisitions

	_, fk := lockKeys(configOf(l), "acct:7")
	restored, err := rdb.Get(ctx, fk).Int64()
	if err != nil {
		t.Fatalf("fence counter after the restore: %v (the snapshot was not loaded?)", err)
	}
	if lock.Fence(restored) >= old.Fence() {
		t.Fatalf("restored counter %d is not behind the live holder's fence %d: the fault did not happen", restored, old.Fence())
	}

	// The old holder's lock key was not in the snapshot: the lock is free.
	// A client may first report the connections the restart broke (rueidis
	// does not resend scripts by itself): attempts that failed that way are
	// repeated, never one that was refused as held.
	next, err := l.TryAcquire(ctx, "acct:7")
	for i := 0; i < 50 && err != nil && !errors.Is(err, lock.ErrNotAcquired); i++ {
		t.Logf("attempt %d after the restore: %v", i+1, err)
		time.Sleep(20 * time.Millisecond)
		next, err = l.TryAcquire(ctx, "acct:7")
	}
	if err != nil {
		t.Fatalf("acquire after the restore: %v", err)
	}
	for _, f := range issued {
		if next.Fence() <= f {
			t.Fatalf("fence after the restore %d is not above fence %d issued before it (all issued: %v)", next.Fence(), f, issued)
		}
	}
	if err := accounts.Update(ctx, db, 7, next.Fence(), "balance = ?", 2); err != nil {
		t.Fatalf("new holder's fenced write: %v", err)
	}
	if err := accounts.Update(ctx, db, 7, old.Fence(), "balance = ?", 3); !errors.Is(err, lock.ErrStaleFence) {
		t.Fatalf("live old holder's fenced write after the restore: %v, want ErrStaleFence", err)
	}
	if got := balance(t, db, 7); got != 2 {
		t.Fatalf("balance %d, want the new holder's 2", got)
	}
	// The old holder learns at its next renewal that the key holds another
	// owner's token, and its release leaves the new holder's lock alone.
	if cause := waitDone(t, old.Context()); !lock.IsLost(cause) {
		t.Fatalf("old holder's cause %v, want a lost lease", cause)
	}
	if err := old.Release(ctx); !lock.IsLost(err) {
		t.Fatalf("old holder's release: %v, want a lost lease", err)
	}
	second := mustAcquireAfter(t, l, next, "acct:7")
	if second.Fence() <= next.Fence() {
		t.Fatalf("fence %d after %d", second.Fence(), next.Fence())
	}
	if err := second.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// mustAcquireAfter releases prev and acquires name again.
func mustAcquireAfter(t *testing.T, l *redislock.Locker, prev lock.Lease, name string) *redislock.Lease {
	t.Helper()
	ctx := ctxT(t, 10*time.Second)
	if err := prev.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return mustAcquire(t, l, ctx, name)
}
