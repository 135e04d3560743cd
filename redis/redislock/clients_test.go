package redislock

import (
	"os"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
)

// The whole suite runs once per client: TestMain hands it to
// testenv.RunOnEachRedisClient, which sets suiteClient to each kind in
// turn, and every test builds its Lockers with lockerOn, which picks the
// client. Tests inspect Redis through their own
// go-redis client; only the Locker under test changes.
const (
	goRedisClient = testenv.GoRedisKind
	rueidisClient = testenv.RueidisKind
)

var suiteClient = goRedisClient

// childClientEnv tells a crash or pause child which client to use.
const childClientEnv = "IDEM_REDISLOCK_CLIENT"

// lockerOn returns a Locker with cfg on the server rdb talks to, through the
// suite's client: rdb itself (go-redis) or a new rueidis client on the same
// address.
func lockerOn(t testing.TB, rdb *redis.Client, cfg *Config) *Locker {
	t.Helper()
	var (
		l   *Locker
		err error
	)
	switch suiteClient {
	case rueidisClient:
		l, err = NewRueidis(redistest.Rueidis(t, rdb.Options().Addr), cfg)
	default:
		l, err = New(rdb, cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// lockerVia returns a Locker with cfg through the suite's client, made by
// goRedis or ru (a topology other than the shared server: a cluster, a
// sentinel).
func lockerVia(t testing.TB, cfg *Config, goRedis func() redis.UniversalClient, ru func() rueidis.Client) *Locker {
	t.Helper()
	var (
		l   *Locker
		err error
	)
	if suiteClient == rueidisClient {
		l, err = NewRueidis(ru(), cfg)
	} else {
		l, err = New(goRedis(), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// childLocker is lockerOn for a child process (no testing.TB there).
func childLocker(addr string, cfg *Config) (*Locker, error) {
	if os.Getenv(childClientEnv) == rueidisClient {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}})
		if err != nil {
			return nil, err
		}
		return NewRueidis(c, cfg)
	}
	return New(redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}), cfg)
}
