package redislock_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/redislock"
	"github.com/redis/go-redis/v9"
)

// A failover to a lagging replica: a private primary replicates to a private
// replica through a TCP proxy; the proxy black-holes the replication link
// (a partition), more locks are taken on the primary (one holder stays
// alive), the primary is killed and the replica promoted (REPLICAOF NO ONE),
// as Sentinel would. The promoted replica's fence counter is behind fences
// already handed out. Its next fence must be above all of them. What does
// not hold is shown too: the live holder's lock is not on the new primary,
// so a second holder acquires at once; the fences keep the data right.
func TestFenceAfterFailoverToLaggingReplica(t *testing.T) {
	t.Parallel()
	primary, replica := testenv.StartRedis(t), testenv.StartRedis(t)
	ctx := ctxT(t, 60*time.Second)
	link := testenv.NewFaultProxy(t, primary.Addr())
	rRdb := redis.NewClient(&redis.Options{Addr: replica.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rRdb.Close() })
	host, port, _ := net.SplitHostPort(link.Addr())
	if err := rRdb.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		t.Fatal(err)
	}

	pRdb := redis.NewClient(&redis.Options{Addr: primary.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { pRdb.Close() })
	cfg := &redislock.Config{TTL: 2 * time.Second}
	onPrimary := lockerOn(t, pRdb, cfg)
	db := fencedSQLite(t)
	var issued []lock.Fence
	cycle := func() {
		ls := mustAcquire(t, onPrimary, ctx, "acct:7")
		issued = append(issued, ls.Fence())
		if err := ls.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		cycle()
	}
	waitReplicated(t, ctx, pRdb, rRdb)

	link.Set(testenv.BlackHole) // the replica stops hearing from the primary
	for range 3 {
		cycle()
	}
	a := mustAcquire(t, onPrimary, ctx, "acct:7") // alive across the failover
	issued = append(issued, a.Fence())
	if err := accounts.Update(ctx, db, 7, a.Fence(), "balance = ?", 1); err != nil {
		t.Fatal(err)
	}

	primary.Kill()
	if err := rRdb.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}
	onReplica := lockerOn(t, rRdb, cfg)
	_, fk := lockKeys(configOf(onReplica), "acct:7")
	if c, err := rRdb.Get(ctx, fk).Int64(); err != nil || lock.Fence(c) >= a.Fence() {
		t.Fatalf("promoted replica's counter %d (%v) is not behind the live holder's fence %d: the replica did not lag", c, err, a.Fence())
	}

	// Not promised: mutual exclusion. The live holder's lock was never
	// replicated, so a second holder gets the name at once.
	b, err := onReplica.TryAcquire(ctx, "acct:7")
	if err != nil {
		t.Fatalf("acquire on the promoted replica: %v", err)
	}
	// Promised: its fence is above every fence handed out before.
	for _, f := range issued {
		if b.Fence() <= f {
			t.Fatalf("fence after the failover %d not above fence %d issued before it (all: %v)", b.Fence(), f, issued)
		}
	}
	if err := accounts.Update(ctx, db, 7, b.Fence(), "balance = ?", 2); err != nil {
		t.Fatal(err)
	}
	if err := accounts.Update(ctx, db, 7, a.Fence(), "balance = ?", 3); !errors.Is(err, lock.ErrStaleFence) {
		t.Fatalf("the old primary's holder's write: %v, want ErrStaleFence", err)
	}
	// The old holder cannot renew on the dead primary: its context ends at
	// its local deadline.
	if cause := waitDone(t, a.Context()); !errors.Is(cause, lock.ErrExpired) {
		t.Fatalf("old holder's cause %v, want ErrExpired", cause)
	}
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_ = a.Release(rctx) // the old primary is gone: an error, never a hang
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// waitReplicated waits until the replica's link is up and it has applied
// everything the primary has written.
func waitReplicated(t *testing.T, ctx context.Context, primary, replica *redis.Client) {
	t.Helper()
	for {
		want := replOffset(t, ctx, primary, "master_repl_offset")
		info := replica.Info(ctx, "replication").Val()
		if strings.Contains(info, "master_link_status:up") && replOffset(t, ctx, replica, "slave_repl_offset") >= want && want > 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("replica never caught up:\n%s", info)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func replOffset(t *testing.T, ctx context.Context, rdb *redis.Client, field string) int64 {
	t.Helper()
	for _, line := range strings.Split(rdb.Info(ctx, "replication").Val(), "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return -1
}
