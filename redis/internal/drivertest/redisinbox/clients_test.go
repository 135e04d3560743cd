package redisinbox_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisinbox"
)

// The tests of what the package promises run once per client: forEachClient
// gives each a subtest per kind, and the FastPath under test comes from
// fastOn. Tests inspect, flush and clean Redis through their own go-redis
// client; only the FastPath's client changes.
const (
	goRedisClient = "go-redis"
	rueidisClient = "rueidis"
)

// forEachClient runs fn as one subtest per client, one after the other.
func forEachClient(t *testing.T, fn func(t *testing.T, kind string)) {
	for _, kind := range []string{goRedisClient, rueidisClient} {
		t.Run(kind, func(t *testing.T) { fn(t, kind) })
	}
}

// boundedClients are the clients whose calls the fault tests bound: go-redis
// with and without ContextTimeoutEnabled (the FastPath bounds the latter
// itself), and rueidis.
var boundedClients = []struct {
	name   string
	kind   string
	honour bool // the go-redis client's ContextTimeoutEnabled
}{
	{"go-redis,ContextTimeoutEnabled=true", goRedisClient, true},
	{"go-redis,ContextTimeoutEnabled=false", goRedisClient, false},
	{rueidisClient, rueidisClient, true},
}

// fastOn returns a FastPath with cfg on the server rdb talks to (the shared
// one, a private one, or a fault proxy), through kind: rdb itself, or a new
// rueidis client on rdb's address with its defaults.
func fastOn(t testing.TB, kind string, rdb *redis.Client, cfg *redisinbox.Config) *redisinbox.FastPath {
	t.Helper()
	return topology{
		goRedis: func(testing.TB) redis.UniversalClient { return rdb },
		rueidis: func(t testing.TB) rueidis.Client { return redistest.Rueidis(t, rdb.Options().Addr) },
	}.fast(t, kind, cfg)
}

// topology gives the clients of one Redis deployment (a server, a cluster,
// a sentinel): a go-redis client and a rueidis client on it.
type topology struct {
	goRedis func(t testing.TB) redis.UniversalClient
	rueidis func(t testing.TB) rueidis.Client
}

// fast returns a FastPath with cfg on a new client of kind.
func (tp topology) fast(t testing.TB, kind string, cfg *redisinbox.Config) *redisinbox.FastPath {
	t.Helper()
	var (
		fp  *redisinbox.FastPath
		err error
	)
	switch kind {
	case rueidisClient:
		fp, err = redisinbox.NewRueidis(tp.rueidis(t), cfg)
	default:
		fp, err = redisinbox.New(tp.goRedis(t), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return fp
}
