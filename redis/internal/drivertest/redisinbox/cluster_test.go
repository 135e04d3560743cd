package redisinbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisinbox"
)

// checkTopology runs every script decision and the concurrent-duplicates
// check on tp through kind; inspect reads the keys, prefix is the test's.
func checkTopology(t *testing.T, tp topology, kind string, inspect redis.Cmdable, prefix string) {
	t.Helper()
	// A generous Timeout, as below: the first call on a new cluster client
	// discovers the slots and dials a master, which took more than the
	// default 200 ms at a load average of 20 (a flake of the run without
	// the shared services, where this private cluster still runs).
	checkScripts(t, tp.fast(t, kind, &redisinbox.Config{Prefix: prefix + "s:", ClaimTTL: time.Minute, Timeout: 10 * time.Second}), inspect, prefix+"s:")
	checkConcurrentDuplicates(t, tp.fast(t, kind, &redisinbox.Config{Prefix: prefix + "c:", Timeout: 10 * time.Second}))
}

// TestOnCluster runs the FastPath on a private 3-master Redis Cluster, on
// each client: every script decision, 100 concurrent deliveries of one
// message applied once and its duplicates answered by Redis, and 60
// messages whose entries land on every master (each key is touched by
// single-key scripts only, so no hash tag is needed).
func TestOnCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartRedisCluster(t)
	inspect := redistest.GoRedisCluster(t, cl.Addrs()...)
	tp := topology{
		goRedis: func(t testing.TB) redis.UniversalClient { return redistest.GoRedisCluster(t, cl.Addrs()...) },
		rueidis: func(t testing.TB) rueidis.Client { return redistest.Rueidis(t, cl.Addrs()...) },
	}
	forEachClient(t, func(t *testing.T, kind string) {
		prefix := testenv.Name("idemt") + ":"
		checkTopology(t, tp, kind, inspect, prefix)

		f := newFixture(t, tp.fast(t, kind, &redisinbox.Config{Prefix: prefix + "m:", Timeout: 10 * time.Second}))
		ctx := ctxT(t)
		const n = 60
		for round := range 2 {
			for i := range n {
				id := fmt.Sprint("m", i)
				out, err := f.ib.Process(ctx, "c", id, f.effect(id))
				if want := []inbox.Outcome{inbox.Processed, inbox.Duplicate}[round]; err != nil || out != want {
					t.Fatalf("round %d, %s: %v, %v; want %v", round, id, out, err, want)
				}
			}
		}
		if s := f.ib.Stats(); s.FastPathDuplicates != n || s.FastPathErrors != 0 {
			t.Fatalf("stats %+v, want %d duplicates answered by Redis and no errors", s, n)
		}
		if total, distinct := f.effects(t); total != n || distinct != n {
			t.Fatalf("effects %d (distinct %d), want %d", total, distinct, n)
		}
		var mu sync.Mutex
		masters, withEntries := 0, 0
		err := inspect.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			keys, _, err := node.Scan(ctx, 0, prefix+"m:*", 10000).Result()
			if err != nil {
				return err
			}
			// go-redis visits masters concurrently.
			mu.Lock()
			defer mu.Unlock()
			masters++
			if len(keys) > 0 {
				withEntries++
			}
			return nil
		})
		if err != nil || masters != 3 || withEntries != 3 {
			t.Fatalf("entries on %d of %d masters (%v), want 3 of 3", withEntries, masters, err)
		}
	})
}

// TestOnSentinel runs every script decision and the concurrent-duplicates
// check on a private master found through a Redis Sentinel (go-redis
// NewFailoverClient, rueidis SentinelOption), on each client.
func TestOnSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.StartRedisSentinel(t)
	inspect := sn.GoRedis(t)
	tp := topology{
		goRedis: func(t testing.TB) redis.UniversalClient { return sn.GoRedis(t) },
		rueidis: func(t testing.TB) rueidis.Client { return sn.Rueidis(t) },
	}
	forEachClient(t, func(t *testing.T, kind string) {
		checkTopology(t, tp, kind, inspect, testenv.Name("idemt")+":")
	})
}
