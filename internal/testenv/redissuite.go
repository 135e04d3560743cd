package testenv

import (
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/redisclient"
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
// values by *kind.
func RunOnEachRedisClient(m *testing.M, suite string, kind *string, leaks ...goleak.Option) int {
	for _, k := range []string{GoRedisKind, RueidisKind} {
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
