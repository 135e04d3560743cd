package main

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/internal/testenv"
)

// TestE2ECacheDownAtStartup: the proxy starts with its Redis cache down
// (the rueidis client of a redis:// DSN dials again when used), serves
// every request from the durable store meanwhile, and puts the cache back
// to use once Redis is up.
func TestE2ECacheDownAtStartup(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	rs.Kill()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", sqliteDSN(t), "--cache", rs.URL())
	if !strings.Contains(p.stderr.String(), "cache unreachable at startup") {
		t.Errorf("no startup warning about the cache:\n%s", p.stderr)
	}
	first := post(t, p.url, "d-1", "x")
	if r := post(t, p.url, "d-1", "x"); first.status != 201 || !r.replayed || r.body != first.body {
		t.Fatalf("without the cache: %+v, then %+v", first, r)
	}
	rs.Start()
	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr()})
	t.Cleanup(func() { rdb.Close() })
	n := 0
	poll(t, "a record in the cache", func() bool {
		n++
		if r := post(t, p.url, "d-new-"+strconv.Itoa(n), "y"); r.status != 201 {
			t.Fatalf("new key with the cache back: %+v", r)
		}
		keys, _ := rdb.Keys(context.Background(), "*").Result()
		return len(keys) > 0
	})
	if up.count("d-1") != 1 {
		t.Errorf("d-1 executed %d times", up.count("d-1"))
	}
}
