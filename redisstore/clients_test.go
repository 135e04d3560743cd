package redisstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/redisclient"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redisstore"
)

// The whole suite runs once per client: TestMain calls m.Run with
// suiteClient set to each kind in turn, and every test builds its stores
// with storeOn, which picks the client. Tests inspect Redis through their
// own go-redis client; only the store under test changes.
const (
	goRedisClient = "go-redis"
	rueidisClient = "rueidis"
)

var suiteClient = goRedisClient

// childClientEnv tells a crash child which client to use.
const childClientEnv = "IDEM_REDISSTORE_CLIENT"

func runForEachClient(m *testing.M, leaks ...goleak.Option) int {
	for _, kind := range []string{goRedisClient, rueidisClient} {
		suiteClient = kind
		fmt.Printf("=== redisstore suite on %s\n", kind)
		if code := m.Run(); code != 0 {
			fmt.Printf("--- FAIL: redisstore suite on %s\n", kind)
			return code
		}
		if err := goleak.Find(leaks...); err != nil {
			fmt.Printf("--- FAIL: redisstore suite on %s: goroutines leaked: %v\n", kind, err)
			return 1
		}
	}
	return 0
}

// storeOn returns a store with cfg on the server c talks to, through the
// suite's client: c itself (go-redis), or a rueidis client with c's options
// (redisclient.RueidisOption: address, credentials, timeouts, retries),
// closed when the test ends.
func storeOn(t testing.TB, c *redis.Client, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	var (
		s   *redisstore.Store
		err error
	)
	if suiteClient == rueidisClient {
		opt := *c.Options()
		if opt.MaxRetries == 0 {
			opt.MaxRetries = -1 // a created client's options: 0 is "no retries"
		}
		var closeClient func()
		s, closeClient, err = openStore(rueidisClient, &opt, cfg)
		if err == nil {
			t.Cleanup(closeClient)
		}
	} else {
		s, err = redisstore.New(c, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openStore is storeOn without testing.TB, for crash children: kind is the
// client, opt the server and its settings.
func openStore(kind string, opt *redis.Options, cfg *redisstore.Config) (*redisstore.Store, func(), error) {
	if kind != rueidisClient {
		o := *opt
		o.ContextTimeoutEnabled = true
		c := redis.NewClient(&o)
		s, err := redisstore.New(c, cfg)
		return s, func() { c.Close() }, err
	}
	c, err := rueidis.NewClient(redisclient.RueidisOption(opt))
	if err != nil {
		return nil, nil, err
	}
	s, err := redisstore.NewRueidis(c, cfg)
	return s, c.Close, err
}

// unreachableStore returns a store whose server refuses connections. A
// go-redis client is pointed at a closed port; rueidis dials at
// construction, so it connects through a proxy that then refuses.
func unreachableStore(t *testing.T, cfg *redisstore.Config) *redisstore.Store {
	t.Helper()
	if suiteClient != rueidisClient {
		s, err := redisstore.New(unreachableClient(t), cfg)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	c, _ := sharedClient(t)
	p := testenv.NewFaultProxy(t, c.Options().Addr)
	opt := *c.Options()
	opt.Addr, opt.MaxRetries, opt.DialTimeout = p.Addr(), -1, 200*time.Millisecond
	s := storeOn(t, redis.NewClient(&opt), cfg)
	p.Set(testenv.Refuse)
	return s
}
