package shop

import (
	"context"
	"os"
	"os/exec"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(RunChild())
	}
	// The redis-down-rejects storms point go-redis at a refused port: it
	// logs every failed dial (idem demo silences it the same way).
	redis.SetLogger(quietRedisLog{})
	// After PoolSize failed dials go-redis starts a probe goroutine that
	// sleeps a second between dials and ends at the first one after its
	// client is closed: not a leak of ours, and it may outlive goleak's
	// retries by a moment (as in redis/redisstore's tests).
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// quietRedisLog drops go-redis's log lines.
type quietRedisLog struct{}

func (quietRedisLog) Printf(context.Context, string, ...any) {}

// childCommand re-runs the test binary as a consumer child.
func childCommand() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
