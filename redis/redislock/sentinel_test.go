package redislock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/redis/internal/redistest"
)

// TestThroughSentinel: a Locker that finds its master through a Redis
// Sentinel, on the suite's client (go-redis NewFailoverClient, rueidis
// SentinelOption): a held lock refuses a second holder, concurrent
// holders of one name run one at a time with distinct fences, and the
// lock's key lives on the sentinel's master.
func TestThroughSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.StartRedisSentinel(t)
	cfg := &Config{TTL: 2 * time.Second, Prefix: testenv.Name("idemt") + ":lock:"}
	l := lockerVia(t, cfg,
		func() redis.UniversalClient { return sn.GoRedis(t) },
		func() rueidis.Client { return sn.Rueidis(t) })
	ctx := ctxT(t, 30*time.Second)
	held := mustAcquire(t, l, ctx, "order:1")
	if _, err := l.TryAcquire(ctx, "order:1"); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("second TryAcquire of a held lock: %v", err)
	}
	key, _ := l.keys("order:1")
	direct := redis.NewClient(&redis.Options{Addr: sn.Master.Addr()})
	t.Cleanup(func() { direct.Close() })
	if n, err := direct.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("the lock's key on the sentinel's master: %d, %v", n, err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}

	var (
		mu     sync.Mutex
		inside int
		fences = map[lock.Fence]bool{}
		wg     sync.WaitGroup
	)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := lock.Do(ctx, l, "shared", func(ctx context.Context, f lock.Fence) error {
				mu.Lock()
				inside++
				if inside != 1 || fences[f] {
					t.Errorf("%d holders inside, fence %d seen before: %v", inside, f, fences[f])
				}
				fences[f] = true
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inside--
				mu.Unlock()
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
}
