package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/idemkit/idem/internal/testenv"
)

// RedisSentinel is a private Redis master on a free loopback port and one
// `redis-server --sentinel` process watching it, each in a temp dir, for
// tests that reach Redis through Sentinel (go-redis NewFailoverClient,
// rueidis SentinelOption). Both are killed when the test ends.
type RedisSentinel struct {
	// Master is the watched server; a test may kill or restart it.
	Master *testenv.RedisServer
	// MasterSet is the name the sentinel knows the master by.
	MasterSet string
	addr      string
}

// StartRedisSentinel starts a private master (testenv.StartRedis) and a sentinel
// monitoring it under a unique master-set name, and waits until the
// sentinel reports the master's address. It skips (or fails under
// IDEM_REQUIRE_SERVICES=1) when redis-server is missing.
func StartRedisSentinel(tb testing.TB) *RedisSentinel {
	tb.Helper()
	master := testenv.StartRedis(tb)
	s := &RedisSentinel{Master: master, MasterSet: testenv.Name("idem-master")}
	port := testenv.FreePort(tb)
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	dir := tb.TempDir()
	conf := filepath.Join(dir, "sentinel.conf") // the sentinel rewrites its config: a file of its own
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nlogfile %s\n"+
		"sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %[4]s 5000\n",
		port, dir, filepath.Join(dir, "sentinel.log"), s.MasterSet, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command("redis-server", conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start redis sentinel: %v", err)
	}
	tb.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	want := []string{"127.0.0.1", strconv.Itoa(master.Port)}
	deadline := time.Now().Add(10 * time.Second)
	var got []string
	for time.Now().Before(deadline) {
		if got = sentinelMaster(s.addr, s.MasterSet); len(got) == 2 && got[0] == want[0] && got[1] == want[1] {
			return s
		}
		time.Sleep(25 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(dir, "sentinel.log"))
	tb.Fatalf("sentinel on %s never reported master %s at %v (got %v):\n%s", s.addr, s.MasterSet, want, got, log)
	return nil
}

// Addrs are host:port of the sentinels (one).
func (s *RedisSentinel) Addrs() []string { return []string{s.addr} }

// sentinelMaster asks the sentinel at addr for the address of master set
// name (SENTINEL GET-MASTER-ADDR-BY-NAME, spoken in RESP2 by hand), or nil.
func sentinelMaster(addr, name string) []string {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return nil
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	args := []string{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name}
	req := "*" + strconv.Itoa(len(args)) + "\r\n"
	for _, a := range args {
		req += "$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n"
	}
	if _, err := c.Write([]byte(req)); err != nil {
		return nil
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "*2") {
		return nil
	}
	var out []string
	for range 2 {
		if _, err := r.ReadString('\n'); err != nil { // $len
			return nil
		}
		v, err := r.ReadString('\n')
		if err != nil {
			return nil
		}
		out = append(out, strings.TrimRight(v, "\r\n"))
	}
	return out
}

// GoRedis returns a go-redis failover client that finds the master through
// the sentinel, with context deadlines honoured, closed when the test ends.
func (s *RedisSentinel) GoRedis(tb testing.TB) *redis.Client {
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterSet, SentinelAddrs: s.Addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { c.Close() })
	return c
}

// Rueidis returns a rueidis client that finds the master through the
// sentinel (SentinelOption.MasterSet), closed when the test ends.
func (s *RedisSentinel) Rueidis(tb testing.TB) rueidis.Client {
	tb.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: s.Addrs(), Sentinel: rueidis.SentinelOption{MasterSet: s.MasterSet}})
	if err != nil {
		tb.Fatalf("rueidis client through sentinel %v: %v", s.Addrs(), err)
	}
	tb.Cleanup(c.Close)
	return c
}
