package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisstore"
)

// clusterStore returns a store on cl through the suite's client, under a
// prefix of its own.
func clusterStore(t *testing.T, cl *testenv.RedisCluster) *redisstore.Store {
	t.Helper()
	cfg := &redisstore.Config{Prefix: testenv.Name("idemc") + ":"}
	var (
		s   *redisstore.Store
		err error
	)
	if suiteClient == testenv.RueidisKind {
		s, err = redisstore.NewRueidis(redistest.Rueidis(t, cl.Addrs()...), cfg)
	} else {
		s, err = redisstore.New(redistest.GoRedisCluster(t, cl.Addrs()...), cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestOnCluster runs the store on a private 3-master Redis Cluster, on the
// suite's client: the conformance suite and List; records spread over
// every master (each record is one key, so each script runs on the key's
// master); Purge and Check visit every master.
func TestOnCluster(t *testing.T) {
	t.Parallel()
	cl := testenv.StartRedisCluster(t)
	t.Run("Conformance", func(t *testing.T) {
		idemtest.RunStore(t, idemtest.Harness{
			New:          func(t *testing.T) idem.Store { return clusterStore(t, cl) },
			NativeExpiry: true,
		})
	})
	t.Run("Steps", func(t *testing.T) {
		// The recovery points' key is in its record's slot.
		idemtest.RunSteps(t, idemtest.Harness{New: func(t *testing.T) idem.Store { return clusterStore(t, cl) }})
	})
	t.Run("List", func(t *testing.T) { idemtest.RunList(t, clusterStore(t, cl)) })
	t.Run("DigestsWithPrefix", func(t *testing.T) { idemtest.RunDigestsWithPrefix(t, clusterStore(t, cl)) })
	t.Run("PurgeAndCheck", func(t *testing.T) { clusterPurgeAndCheck(t, cl) })
}

func clusterPurgeAndCheck(t *testing.T, cl *testenv.RedisCluster) {
	s := clusterStore(t, cl)
	admin := redistest.GoRedisCluster(t, cl.Addrs()...)
	ctx := ctxT(t)
	// 60 records, concurrently; every other one logically expired with its
	// TTL removed, for Purge to find on whichever master holds it.
	past := strconv.FormatInt(time.Now().Add(-time.Minute).UnixMicro(), 10)
	const n = 60
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := idem.MustKey("cluster", testenv.Name("k"))
			c, err := s.Begin(ctx, idem.BeginRequest{Key: k, Lease: time.Minute, Retention: time.Hour})
			if err == nil && c.Outcome != idem.Acquired {
				err = errors.New("Begin of a new key: " + c.Outcome.String())
			}
			if err == nil {
				err = s.Complete(ctx, c.Owner, []byte(strconv.Itoa(i)))
			}
			if err == nil && i%2 == 0 {
				err = admin.HSet(ctx, s.Key(k), "x", past).Err()
			}
			if err == nil {
				err = admin.Persist(ctx, s.Key(k)).Err()
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	perMaster := map[string]int{}
	var mu sync.Mutex
	prefix := strings.TrimSuffix(s.Key(idem.MustKey("x", "y")), idem.MustKey("x", "y").Digest().String())
	err := admin.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		keys, err := m.Keys(ctx, prefix+"*").Result()
		mu.Lock()
		perMaster[m.Options().Addr] = len(keys)
		mu.Unlock()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for addr, k := range perMaster {
		if k == 0 {
			t.Errorf("master %s holds no records: %v", addr, perMaster)
		}
	}
	if got, err := s.Purge(ctx, 0, 7); err != nil || got != n/2 {
		t.Fatalf("Purge on the cluster = %d, %v; want %d", got, err, n/2)
	}
	if recs, err := s.List(ctx, idem.StateCompleted, false, 1000); err != nil || len(recs) != n/2 {
		t.Fatalf("List after Purge = %d records, %v; want %d", len(recs), err, n/2)
	}

	if err := s.Check(ctx); err != nil {
		t.Fatalf("Check on a noeviction cluster = %v", err)
	}
	// One master with an evicting policy: Check names it.
	one := redis.NewClient(&redis.Options{Addr: cl.Addrs()[1]})
	t.Cleanup(func() { one.Close() })
	if err := one.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	err = s.Check(ctx)
	if !errors.Is(err, redisstore.ErrEvictionPolicy) || !strings.Contains(err.Error(), "allkeys-lru") {
		t.Errorf("Check with one evicting master = %v, want ErrEvictionPolicy naming allkeys-lru", err)
	}
}
