package redislock

import (
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/lock"
)

// TestExtremeTTL: a TTL of up to math.MaxInt64 nanoseconds (292 years) is
// a lock held "for ever": one holder, a lease valid until the far future,
// a Redis key that does not expire, and a Release that frees it. The
// local deadline (TTL − SafetyMargin past the acquisition) and the
// watchdog's TTL/3 stay in the future; PX gets the TTL in milliseconds,
// which Redis accepts up to far beyond 292 years.
//
// The default FenceTTL (7 days) is shorter than such a TTL, and New says
// so; a caller who wants it sets FenceTTL too.
func TestExtremeTTL(t *testing.T) {
	t.Parallel()
	ttls := []time.Duration{
		math.MaxInt64,
		math.MaxInt64 - 1,
		time.Duration(math.MaxInt64 - time.Now().UnixNano() + int64(time.Hour)), // past the end of Unix nanoseconds
	}
	unused := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer unused.Close()
	for _, ttl := range ttls {
		_, err := New(unused, &Config{TTL: ttl})
		configtest.Want(t, err, "redislock", "Config.FenceTTL")

		for _, fenceTTL := range []time.Duration{-1, ttl} {
			l, rdb := newLocker(t, &Config{TTL: ttl, FenceTTL: fenceTTL})
			ctx := ctxT(t, 30*time.Second)
			ls := mustAcquire(t, l, ctx, "forever")
			var wg sync.WaitGroup
			errs := make(chan error, 20)
			for range cap(errs) {
				wg.Go(func() {
					_, err := l.TryAcquire(ctx, "forever")
					errs <- err
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if !errors.Is(err, lock.ErrNotAcquired) {
					t.Fatalf("TTL %v: TryAcquire while held = %v, want ErrNotAcquired", ttl, err)
				}
			}
			far := time.Now().AddDate(200, 0, 0)
			if err := ls.Valid(); err != nil || !ls.Deadline().After(far) {
				t.Errorf("TTL %v: Valid = %v, Deadline %v; want valid for more than 200 years", ttl, err, ls.Deadline())
			}
			key, _ := l.keys("forever")
			if pttl := rdb.PTTL(ctx, key).Val(); pttl < 200*365*24*time.Hour {
				t.Errorf("TTL %v: the lock key's PTTL is %v, want more than 200 years", ttl, pttl)
			}
			if err := ls.Release(ctx); err != nil {
				t.Fatalf("TTL %v: Release: %v", ttl, err)
			}
			next := mustAcquire(t, l, ctx, "forever")
			if next.Fence() <= ls.Fence() {
				t.Errorf("TTL %v: fence %d after %d", ttl, next.Fence(), ls.Fence())
			}
			if err := next.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
}
