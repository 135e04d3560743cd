package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
)

// TestThroughSentinel runs the conformance suite and Check on a store that
// finds its master through a Redis Sentinel, on the suite's client: go-redis
// NewFailoverClient (with ContextTimeoutEnabled), or rueidis with
// SentinelOption.MasterSet.
func TestThroughSentinel(t *testing.T) {
	t.Parallel()
	sn := redistest.StartRedisSentinel(t)
	open := func(t *testing.T) *redisstore.Store {
		cfg := &redisstore.Config{Prefix: testenv.Name("idems") + ":"}
		var (
			s   *redisstore.Store
			err error
		)
		if suiteClient == testenv.RueidisKind {
			s, err = redisstore.NewRueidis(sn.Rueidis(t), cfg)
		} else {
			s, err = redisstore.New(sn.GoRedis(t), cfg)
		}
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open(t)
	ctx := ctxT(t)
	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check through the sentinel: %v", err)
	}
	k := key(t)
	if _, err := s.Begin(ctx, idem.BeginRequest{Key: k}); err != nil {
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: sn.Master.Addr()})
	t.Cleanup(func() { direct.Close() })
	if n, err := direct.Exists(ctx, s.Key(k)).Result(); err != nil || n != 1 {
		t.Fatalf("the record on the sentinel's master: %d, %v", n, err)
	}
	idemtest.RunStore(t, idemtest.Harness{
		New:          func(t *testing.T) idem.Store { return open(t) },
		NativeExpiry: true,
	})
}
