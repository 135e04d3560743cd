package redistest

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// Rueidis returns a rueidis client on addrs (one address: a single node;
// several, or one node of a cluster: rueidis discovers the cluster), closed
// when the test ends. Automatic pipelining stays on, as in production.
func Rueidis(tb testing.TB, addrs ...string) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: addrs})
	if err != nil {
		tb.Fatalf("rueidis client on %v: %v", addrs, err)
	}
	tb.Cleanup(c.Close)
	return c
}

// GoRedisCluster returns a go-redis cluster client on addrs, with context
// deadlines honoured, closed when the test ends.
func GoRedisCluster(tb testing.TB, addrs ...string) *redis.ClusterClient {
	tb.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}
