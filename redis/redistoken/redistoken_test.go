package redistoken_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/tokentest"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redistoken"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testenv.RueidisLeakOptions()...) }

func newStore(t *testing.T, retain time.Duration) (*redistoken.Store, *redis.Client, string) {
	t.Helper()
	c, prefix := redistest.RedisClient(t)
	s, err := redistoken.New(c, &redistoken.Config{Prefix: prefix, Retain: retain})
	if err != nil {
		t.Fatal(err)
	}
	return s, c, prefix
}

func TestConformance(t *testing.T) {
	tokentest.Run(t, tokentest.Harness{
		New: func(t *testing.T, retain time.Duration) onetime.Store {
			s, _, _ := newStore(t, retain)
			return s
		},
		Unreachable: func(t *testing.T) onetime.Store {
			c := redis.NewClient(&redis.Options{
				Addr:        "127.0.0.1:" + strconv.Itoa(testenv.RefusedPort(t)),
				DialTimeout: 200 * time.Millisecond,
				MaxRetries:  -1,
			})
			t.Cleanup(func() { c.Close() })
			s, err := redistoken.New(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		NativeExpiry: true,
	})
}

// TestConformanceRueidis runs the same suite on a rueidis client.
func TestConformanceRueidis(t *testing.T) {
	tokentest.Run(t, tokentest.Harness{
		New: func(t *testing.T, retain time.Duration) onetime.Store {
			shared, prefix := redistest.RedisClient(t) // for the prefix and its cleanup
			s, err := redistoken.NewRueidis(redistest.Rueidis(t, shared.Options().Addr), &redistoken.Config{Prefix: prefix, Retain: retain})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Unreachable: func(t *testing.T) onetime.Store {
			// rueidis dials at construction: point it at a proxy that
			// refuses once the client is up.
			opt, err := redis.ParseURL(testenv.Redis.Need(t))
			if err != nil {
				t.Fatal(err)
			}
			p := testenv.NewFaultProxy(t, opt.Addr)
			c := redistest.Rueidis(t, p.Addr())
			p.Set(testenv.Refuse)
			s, err := redistoken.NewRueidis(c, nil)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		NativeExpiry: true,
	})
}

// TestConformanceCluster runs the suite on a private 3-master Redis
// Cluster, through each client: every token's key is its own hash tag.
func TestConformanceCluster(t *testing.T) {
	cl := testenv.StartRedisCluster(t)
	runOnEachClient(t,
		func(t *testing.T) redis.UniversalClient { return redistest.GoRedisCluster(t, cl.Addrs()...) },
		func(t *testing.T) rueidis.Client { return redistest.Rueidis(t, cl.Addrs()...) })
}

// runOnEachClient runs the suite on stores through a go-redis client and a
// rueidis client of the same topology, made by goRedis and ru.
func runOnEachClient(t *testing.T, goRedis func(*testing.T) redis.UniversalClient, ru func(*testing.T) rueidis.Client) {
	for _, kind := range []string{"go-redis", "rueidis"} {
		t.Run(kind, func(t *testing.T) {
			tokentest.Run(t, tokentest.Harness{
				New: func(t *testing.T, retain time.Duration) onetime.Store {
					cfg := &redistoken.Config{Prefix: testenv.Name("idemt") + ":", Retain: retain}
					var (
						s   *redistoken.Store
						err error
					)
					if kind == "rueidis" {
						s, err = redistoken.NewRueidis(ru(t), cfg)
					} else {
						s, err = redistoken.New(goRedis(t), cfg)
					}
					if err != nil {
						t.Fatal(err)
					}
					return s
				},
				NativeExpiry: true,
			})
		})
	}
}

// TestStoredHashed checks that Redis holds neither the raw token nor the raw
// scope: not in key names, not in values.
func TestStoredHashed(t *testing.T) {
	s, c, prefix := newStore(t, time.Hour)
	tokens, err := onetime.New(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const scope = "user:alice@example.com"
	tok, err := tokens.Issue(ctx, scope)
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Consume(ctx, scope, tok); err != nil {
		t.Fatal(err)
	}
	keys, err := c.Keys(ctx, prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 1 {
		t.Fatalf("keys under the prefix: %q, want one", keys)
	}
	if want := prefix + "{" + onetime.TokenDigest(tok).String() + "}"; keys[0] != want {
		t.Fatalf("key %q, want %q", keys[0], want)
	}
	vals, err := c.HGetAll(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	for f, v := range vals {
		for _, secret := range []string{tok, scope, "alice"} {
			if strings.Contains(f+v, secret) || strings.Contains(keys[0], secret) {
				t.Fatalf("field %q=%q holds %q in the clear", f, v, secret)
			}
		}
	}
	if vals["v"] != "1" {
		t.Fatalf("encoding version %q, want 1", vals["v"])
	}
	ttl, err := c.PTTL(ctx, keys[0]).Result()
	if err != nil || ttl <= time.Hour {
		t.Fatalf("PTTL %v (%v), want more than the TTL (retention after expiry)", ttl, err)
	}
}

// TestRestartForgetsTokens: a Redis that restarts empty forgets its tokens,
// and every forgotten token is refused (ErrUnknown), never accepted; while
// it is down, calls fail as unavailable.
func TestRestartForgetsTokens(t *testing.T) {
	srv := testenv.StartRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	s, err := redistoken.New(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens, _ := onetime.New(s, nil)
	ctx := context.Background()
	used, _ := tokens.Issue(ctx, "s")
	fresh, err := tokens.Issue(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Consume(ctx, "s", used); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	if err := tokens.Consume(ctx, "s", fresh); !idem.IsUnavailable(err) {
		t.Fatalf("Consume while Redis is down: %v, want unavailable", err)
	}
	srv.Start()
	for _, tok := range []string{used, fresh} {
		if err := tokens.Consume(ctx, "s", tok); err != onetime.ErrUnknown {
			t.Fatalf("Consume after an empty restart: %v, want ErrUnknown", err)
		}
	}
}
