package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"
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

// RueidisLeakOptions are the goleak options for packages whose tests use a
// rueidis cluster client: after a topology refresh rueidis closes replaced
// connections from a goroutine that sleeps 5s first and cannot be stopped
// (cluster.go, _refresh), and a delayed refresh retry that sleeps about a
// second. Both end by themselves; nothing else is ignored.
func RueidisLeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		// A closed cluster or sentinel client may leave the delayed retry
		// of a topology refresh sleeping (singleflight DelayDo, about a
		// second); it ends by itself and does nothing once the client is
		// closed. Seen once in ten runs of inbox/inboxredis.
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	}
}
