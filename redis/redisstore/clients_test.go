package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
)

// The whole suite runs once per client (testenv.RunOnEachRedisClient sets
// suiteClient), and every test builds its stores with storeOn, which picks
// the client. Tests inspect Redis through their own go-redis client; only
// the store under test changes.
var suiteClient = testenv.GoRedisKind

// childClientEnv tells a crash child which client to use.
const childClientEnv = "IDEM_REDISSTORE_CLIENT"

// storeOn returns a store with cfg on the server c talks to, through the
// suite's client: c itself (go-redis), or a rueidis client with c's
// settings (redistest.RueidisLike).
func storeOn(t testing.TB, c *redis.Client, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	return redistest.RedisStoreOn(t, suiteClient, c, cfg)
}

// openStore is a store on opt's server through a client of kind, for crash
// children (no testing.TB there).
func openStore(kind string, opt *redis.Options, cfg *redisstore.Config) (*redisstore.Store, error) {
	if kind != testenv.RueidisKind {
		o := *opt
		o.ContextTimeoutEnabled = true
		return redisstore.New(redis.NewClient(&o), cfg)
	}
	c, err := rueidis.NewClient(redisclient.RueidisOption(opt))
	if err != nil {
		return nil, err
	}
	return redisstore.NewRueidis(c, cfg)
}

// unreachableStore returns a store, on the suite's client, whose server
// refuses connections.
func unreachableStore(t *testing.T, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	return redistest.UnreachableRedisStore(t, suiteClient, cfg)
}
