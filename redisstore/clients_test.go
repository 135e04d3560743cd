package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/redisclient"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redisstore"
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
// settings (testenv.RueidisLike).
func storeOn(t testing.TB, c *redis.Client, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	var (
		s   *redisstore.Store
		err error
	)
	if suiteClient == testenv.RueidisKind {
		s, err = redisstore.NewRueidis(testenv.RueidisLike(t, c), cfg)
	} else {
		s, err = redisstore.New(c, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
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

// unreachableStore returns a store whose server refuses connections. A
// go-redis client is pointed at a closed port; rueidis dials at
// construction, so it connects through a proxy that then refuses.
func unreachableStore(t *testing.T, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	if suiteClient != testenv.RueidisKind {
		s, err := redisstore.New(unreachableClient(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c, _ := sharedClient(t)
	p := testenv.NewFaultProxy(t, c.Options().Addr)
	viaProxy := redis.NewClient(&redis.Options{Addr: p.Addr(), DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { viaProxy.Close() })
	s := storeOn(t, viaProxy, cfg)
	p.Set(testenv.Refuse)
	return s
}
