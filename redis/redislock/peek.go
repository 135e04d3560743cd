package redislock

import (
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/peek"
	"github.com/idemkit/idem/redis/internal/redisclient"
)

// What the fencing tests in internal/drivertest/redislock read from inside
// (see package peek): a lock's keys, the Config in force, and a Locker on a
// client New would refuse.
func init() {
	peek.RedislockKeys = func(l any, name string) (string, string) { return l.(*Locker).keys(name) }
	peek.RedislockConfig = func(l any) any { return l.(*Locker).cfg }
	peek.RedislockOnGoRedis = func(rdb, cfg any) any {
		return build(redisclient.GoRedis(rdb.(redis.UniversalClient)), cfg.(Config))
	}
}
