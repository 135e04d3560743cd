package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
)

// RedisClient connects to the shared test Redis and returns a client and a key
// prefix unique to this test. Tests must keep to their prefix: the shared
// server is never flushed, killed or restarted.
func RedisClient(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	addr := testenv.Redis.Need(tb)
	opt, err := redis.ParseURL(addr)
	if err != nil {
		tb.Fatalf("IDEM_TEST_REDIS: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		testenv.Unavailable(tb, "Redis", err)
	}
	prefix := testenv.Name("idemt") + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return c, prefix
}
