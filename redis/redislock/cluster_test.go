package redislock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/redis/internal/redistest"
)

// TestOnCluster runs the lock on a private 3-master Redis Cluster, on the
// suite's client: names spread over every master (each lock and its fence
// share a slot by the hash tag), mutual exclusion among concurrent holders
// of one name with unique, growing fences, and RaiseFence routed to the
// right node.
func TestOnCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartRedisCluster(t)
	cfg := &Config{TTL: 2 * time.Second, Prefix: testenv.Name("idemt") + ":lock:"}
	l := lockerVia(t, cfg,
		func() redis.UniversalClient { return redistest.GoRedisCluster(t, cl.Addrs()...) },
		func() rueidis.Client { return redistest.Rueidis(t, cl.Addrs()...) })
	ctx := ctxT(t, 60*time.Second)

	// Many names: every slot's master serves some; each acquire, release.
	for i := 0; i < 60; i++ {
		name := "order:" + strconv.Itoa(i)
		ls := mustAcquire(t, l, ctx, name)
		if _, err := l.TryAcquire(ctx, name); !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("second TryAcquire of held %q: %v", name, err)
		}
		if err := ls.Release(ctx); err != nil {
			t.Fatalf("release %q: %v", name, err)
		}
	}
	// The fence counters stayed behind: every master holds some.
	masters, withFences := 0, 0
	err := l.c.ForEachMaster(ctx, func(ctx context.Context, node redisclient.Client) error {
		masters++
		a, err := node.Do(ctx, "SCAN", nil, "0", "MATCH", cfg.Prefix+"*:fence", "COUNT", "10000").Slice()
		if err != nil {
			return err
		}
		if ks, _ := a[1].([]any); len(ks) > 0 {
			withFences++
		}
		return nil
	})
	if err != nil || masters != 3 || withFences != 3 {
		t.Fatalf("fence counters on %d of %d masters (%v), want 3 of 3", withFences, masters, err)
	}

	// Mutual exclusion on one name.
	const n = 24
	var (
		counter, inside, maxInside atomic.Int32
		fences                     sync.Map
		wg                         sync.WaitGroup
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := lock.Do(ctx, l, "shared", func(ctx context.Context, fence lock.Fence) error {
				in := inside.Add(1)
				defer inside.Add(-1)
				for m := maxInside.Load(); in > m && !maxInside.CompareAndSwap(m, in); m = maxInside.Load() {
				}
				if _, dup := fences.LoadOrStore(fence, true); dup {
					t.Errorf("fence %d handed out twice", fence)
				}
				v := counter.Load()
				time.Sleep(time.Millisecond)
				counter.Store(v + 1)
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if counter.Load() != n || maxInside.Load() != 1 {
		t.Fatalf("counter = %d (want %d), max inside = %d (want 1)", counter.Load(), n, maxInside.Load())
	}

	// RaiseFence on the cluster, then a fence above it.
	const raised = lock.Fence(1) << 52
	if got, err := l.RaiseFence(ctx, "shared", raised); err != nil || got != raised {
		t.Fatalf("RaiseFence = %d, %v; want %d", got, err, raised)
	}
	ls := mustAcquire(t, l, ctx, "shared")
	if ls.Fence() <= raised {
		t.Fatalf("fence %d after raising to %d", ls.Fence(), raised)
	}
	if err := ls.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
