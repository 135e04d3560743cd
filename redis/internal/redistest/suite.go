package redistest

import (
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redisclient"
	"github.com/idemkit/idem/redis/redisstore"
)

// RueidisLike returns a rueidis client on the server c talks to, with c's
// settings as redisclient.RueidisOption maps them (address, database,
// credentials, TLS, timeouts; c's MaxRetries of 0, which a created client's
// options hold for "none", disables retries), closed when the test ends.
func RueidisLike(tb testing.TB, c *redis.Client) rueidis.Client {
	tb.Helper()
	opt := *c.Options()
	if opt.MaxRetries == 0 {
		opt.MaxRetries = -1
	}
	// rueidis dials at construction, within c's DialTimeout (200 ms in the
	// fault tests, so that their outages are seen quickly). On a busy
	// machine a first dial to a server that is up can take longer (a
	// private redis-server just started, at load 10: "context deadline
	// exceeded"), so construction is retried for a while: every caller
	// wants a server that answers here.
	deadline := time.Now().Add(30 * time.Second)
	for {
		rc, err := rueidis.NewClient(redisclient.RueidisOption(&opt))
		if err == nil {
			tb.Cleanup(rc.Close)
			return rc
		}
		if time.Now().After(deadline) {
			tb.Fatalf("rueidis client like %s: %v (retried for 30 s)", opt.Addr, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// RedisStoreOn returns a redisstore with cfg on the server c talks to,
// through a client of kind: c itself (GoRedisKind), or RueidisLike(c).
func RedisStoreOn(tb testing.TB, kind string, c *redis.Client, cfg *redisstore.Config) *redisstore.Store {
	tb.Helper()
	var (
		s   *redisstore.Store
		err error
	)
	if kind == testenv.RueidisKind {
		s, err = redisstore.NewRueidis(RueidisLike(tb, c), cfg)
	} else {
		s, err = redisstore.New(c, cfg)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// UnreachableRedisStore returns a redisstore whose server refuses
// connections, through a client of kind. go-redis is pointed at a closed
// port; rueidis dials at construction, so it connects to the shared Redis
// through a fault proxy that then refuses.
func UnreachableRedisStore(tb testing.TB, kind string, cfg *redisstore.Config) *redisstore.Store {
	tb.Helper()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(tb))
	var p *testenv.FaultProxy
	if kind == testenv.RueidisKind {
		opt, err := redis.ParseURL(testenv.Redis.Need(tb))
		if err != nil {
			tb.Fatal(err)
		}
		p = testenv.NewFaultProxy(tb, opt.Addr)
		addr = p.Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	s := RedisStoreOn(tb, kind, c, cfg)
	if p != nil {
		p.Set(testenv.Refuse)
	}
	return s
}
