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
	// The proxy logs the warning before it prints its listening line, but
	// the two arrive on different pipes: wait for stderr's copy.
	poll(t, "the startup warning about the cache", func() bool {
		return strings.Contains(p.stderr.String(), "cache unreachable at startup")
	})
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

// TestE2EStoreDownAtStartup: a sidecar may start before its store. The
// proxy starts with its Redis store down, answers protected requests 503
// (never runs them unprotected) and /readyz 503 while /healthz is 200, and
// serves normally once Redis is up, without a restart.
func TestE2EStoreDownAtStartup(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	rs.Kill()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", rs.URL(), "--admin", "127.0.0.1:0")
	if r := post(t, p.url, "s-1", "x"); r.status != 503 || r.header.Get("Retry-After") == "" {
		t.Fatalf("with the store down: %+v, want 503 with Retry-After", r)
	}
	if up.count("s-1") != 0 {
		t.Fatal("a protected request reached the service with the store down")
	}
	if code := getStatus(t, p.admin+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d with the store down, want 200 (the process is alive)", code)
	}
	if code := getStatus(t, p.admin+"/readyz"); code != 503 {
		t.Errorf("/readyz = %d with the store down, want 503", code)
	}
	rs.Start()
	poll(t, "/readyz with the store up", func() bool { return getStatus(t, p.admin+"/readyz") == 200 })
	first := post(t, p.url, "s-2", "y")
	if r := post(t, p.url, "s-2", "y"); first.status != 201 || !r.replayed || r.body != first.body {
		t.Fatalf("with the store up: %+v, then %+v", first, r)
	}
	poll(t, "the startup warning about the store", func() bool {
		return strings.Contains(p.stderr.String(), "store unreachable at startup")
	})
}

func getStatus(t *testing.T, url string) int {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
