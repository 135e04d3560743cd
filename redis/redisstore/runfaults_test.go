package redisstore_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
)

// durableRedis is a private redis-server that keeps every acknowledged
// write across a restart (appendonly, appendfsync always): the durable
// configuration the fault suite's restart case asks for.
type durableRedis struct {
	t    *testing.T
	port int
	dir  string
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func startDurableRedis(t *testing.T) *durableRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Unavailable(t, "redis-server binary", err)
	}
	r := &durableRedis{t: t, port: testenv.FreePort(t), dir: t.TempDir()}
	r.start()
	t.Cleanup(r.kill)
	return r
}

func (r *durableRedis) addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port)) }

func (r *durableRedis) start() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "yes", "--appendfsync", "always", "--dir", r.dir,
		"--logfile", filepath.Join(r.dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	r.cmd = cmd
	c := redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer c.Close()
	for i := 0; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if i > 400 {
			log, _ := os.ReadFile(filepath.Join(r.dir, "redis.log"))
			r.t.Fatalf("private redis-server did not come up: %v\n%s", err, log)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func (r *durableRedis) kill() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return
	}
	_ = syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	_ = r.cmd.Wait()
	r.cmd = nil
}

// restart SIGKILLs the server and starts it again from its append-only
// file, on the same port.
func (r *durableRedis) restart(t *testing.T) {
	r.kill()
	r.start()
}

// faultClient is a go-redis client as a careful deployment sets it up:
// ContextTimeoutEnabled, go-redis's own retries on (the default), a read
// timeout short enough that a lost reply is resent within the caller's
// deadline. On rueidis the same options give a ConnWriteTimeout of 400ms
// (storeOn).
func faultClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{
		Addr:                  addr,
		ReadTimeout:           400 * time.Millisecond,
		WriteTimeout:          400 * time.Millisecond,
		DialTimeout:           400 * time.Millisecond,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFaults runs the shared fault suite: the store through a TCP fault
// proxy in front of a private Redis, restarted from its append-only file.
func TestFaults(t *testing.T) {
	t.Parallel()
	srv := startDurableRedis(t)
	idemtest.RunFaults(t, idemtest.FaultHarness{
		Target:  srv.addr(),
		Restart: srv.restart,
		New: func(t *testing.T) func(addr string) idem.Store {
			prefix := testenv.Name("idemf") + ":"
			return func(addr string) idem.Store {
				return storeOn(t, faultClient(t, addr), &redisstore.Config{Prefix: prefix})
			}
		},
	})
}
