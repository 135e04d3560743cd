package testenv

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemkit/idem"
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

// OpenRedisConns makes s's client dial every connection it will use before
// a test arms a one-shot fault (DropNextReply, CutNextReply) that should
// hit a command: rueidis spreads commands over its pipelined connections
// at random and dials each on first use, and a handshake would otherwise
// take the fault. It is 64 Gets of a missing key, harmless on go-redis.
func OpenRedisConns(tb testing.TB, s idem.Store) {
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
