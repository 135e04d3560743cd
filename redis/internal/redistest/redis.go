package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
)

// RedisClient connects to the shared test Redis (testenv.UseRedis) and
// returns a client and a key prefix unique to this test, whose keys are
// deleted when the test ends. Tests must keep to their prefix: the shared
// server is never flushed, killed or restarted.
func RedisClient(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	r := testenv.UseRedis(tb)
	c := redis.NewClient(&redis.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB})
	tb.Cleanup(func() { c.Close() })
	return c, r.Prefix
}
