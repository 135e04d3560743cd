package redistoken_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/redis/internal/redistest"
)

// TestConformanceSentinel runs the suite on a store that finds its master
// through a Redis Sentinel, through each client.
func TestConformanceSentinel(t *testing.T) {
	sn := redistest.StartRedisSentinel(t)
	runOnEachClient(t,
		func(t *testing.T) redis.UniversalClient { return sn.GoRedis(t) },
		func(t *testing.T) rueidis.Client { return sn.Rueidis(t) })
}
