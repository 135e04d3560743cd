package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/redisclient"
	"github.com/idemkit/idem/redisstore"
)

// The Redis clients a package's suite runs on, in turn (RunOnEachRedisClient).
const (
	GoRedisKind = "go-redis"
	RueidisKind = "rueidis"
)

// RunOnEachRedisClient runs a package's whole test suite once per Redis
// client: it sets *kind to GoRedisKind, then RueidisKind, calling m.Run
// each time (testing tolerates several m.Run calls, go.dev/issue/23129),
// and checks for leaked goroutines after each pass with leaks ignored. It
// returns the exit code for os.Exit. The tests build their Redis-backed
// values by *kind. When benchmarks are asked for (-test.bench), there is
// one pass, on go-redis: benchmarks name the client they measure
// themselves, so that both appear in one run, side by side.
func RunOnEachRedisClient(m *testing.M, suite string, kind *string, leaks ...goleak.Option) int {
	kinds := []string{GoRedisKind, RueidisKind}
	flag.Parse() // m.Run would; the bench flag is read before it
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		kinds = kinds[:1]
	}
	for _, k := range kinds {
		*kind = k
		fmt.Printf("=== %s suite on %s\n", suite, k)
		if code := m.Run(); code != 0 {
			fmt.Printf("--- FAIL: %s suite on %s\n", suite, k)
			return code
		}
		if err := goleak.Find(leaks...); err != nil {
			fmt.Printf("--- FAIL: %s suite on %s: goroutines leaked: %v\n", suite, k, err)
			return 1
		}
	}
	return 0
}

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
	rc, err := rueidis.NewClient(redisclient.RueidisOption(&opt))
	if err != nil {
		tb.Fatalf("rueidis client like %s: %v", opt.Addr, err)
	}
	tb.Cleanup(rc.Close)
	return rc
}

// RedisStoreOn returns a redisstore with cfg on the server c talks to,
// through a client of kind: c itself (GoRedisKind), or RueidisLike(c).
func RedisStoreOn(tb testing.TB, kind string, c *redis.Client, cfg *redisstore.Config) *redisstore.Store {
	tb.Helper()
	var (
		s   *redisstore.Store
		err error
	)
	if kind == RueidisKind {
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
	addr := "127.0.0.1:" + strconv.Itoa(FreePort(tb))
	var p *FaultProxy
	if kind == RueidisKind {
		opt, err := redis.ParseURL(Redis.Need(tb))
		if err != nil {
			tb.Fatal(err)
		}
		p = NewFaultProxy(tb, opt.Addr)
		addr = p.Addr()
	}
	c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1, ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	s := RedisStoreOn(tb, kind, c, cfg)
	if p != nil {
		p.Set(Refuse)
	}
	return s
}

// OpenRedisConns makes s's client dial every connection it will use before
// a test arms a one-shot fault (DropNextReply, CutNextReply) that should
// hit a command: rueidis spreads commands over its pipelined connections
// at random and dials each on first use, and a handshake would otherwise
// take the fault. It is 64 Gets of a missing key, harmless on go-redis.
func OpenRedisConns(tb testing.TB, s *redisstore.Store) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	k := idem.MustKey("testenv", Name("absent"))
	for range 64 {
		if _, err := s.Get(ctx, k); !errors.Is(err, idem.ErrNotFound) {
			tb.Fatalf("Get of a missing key to open connections: %v", err)
		}
	}
}
