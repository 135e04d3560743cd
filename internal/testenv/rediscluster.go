package testenv

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// RedisCluster is a private Redis Cluster of three masters (no replicas) on
// free loopback ports, each node in its own temp dir, for tests that need
// cluster routing (hash slots, MOVED). It is killed when the test ends.
type RedisCluster struct {
	addrs []string
	cmds  []*exec.Cmd
}

// StartRedisCluster starts three `redis-server --cluster-enabled yes` nodes,
// joins them with `redis-cli --cluster create … --cluster-replicas 0` and
// waits until every node reports cluster_state:ok. It skips (or fails under
// IDEM_REQUIRE_SERVICES=1) when redis-server or redis-cli is missing.
func StartRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	return startRedisCluster(tb, 0)
}

// StartRedisClusterReplicas is StartRedisCluster with one replica per
// master (six nodes, `--cluster-replicas 1`). Addrs lists all six; the
// clients find out which are masters.
func StartRedisClusterReplicas(tb testing.TB) *RedisCluster {
	tb.Helper()
	return startRedisCluster(tb, 1)
}

func startRedisCluster(tb testing.TB, replicas int) *RedisCluster {
	tb.Helper()
	nodes := 3 * (1 + replicas)
	for _, bin := range []string{"redis-server", "redis-cli"} {
		if _, err := exec.LookPath(bin); err != nil {
			Unavailable(tb, bin+" binary", err)
		}
	}
	c := &RedisCluster{}
	tb.Cleanup(c.kill)
	for i := 0; i < nodes; i++ {
		port, bus := FreePort(tb), FreePort(tb)
		dir := filepath.Join(tb.TempDir(), "node"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		cmd := exec.Command("redis-server",
			"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
			"--save", "", "--appendonly", "no", "--dir", dir,
			"--logfile", filepath.Join(dir, "redis.log"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			tb.Fatalf("start redis-server: %v", err)
		}
		c.cmds = append(c.cmds, cmd)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c.addrs = append(c.addrs, addr)
		waitPong(tb, addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		tb.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range c.addrs {
		for {
			host, port, _ := net.SplitHostPort(addr)
			out, _ := exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port, "CLUSTER", "INFO").Output()
			if bytes.Contains(out, []byte("cluster_state:ok")) && bytes.Contains(out, []byte("cluster_known_nodes:"+strconv.Itoa(nodes)+"\r")) {
				break
			}
			if ctx.Err() != nil {
				tb.Fatalf("Redis Cluster node %s never became ready:\n%s", addr, out)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs are host:port of the nodes (the three masters, and their
// replicas in a cluster of StartRedisClusterReplicas).
func (c *RedisCluster) Addrs() []string { return append([]string(nil), c.addrs...) }

func (c *RedisCluster) kill() {
	for _, cmd := range c.cmds {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}
	c.cmds = nil
}

// waitPong waits until addr answers PING.
func waitPong(tb testing.TB, addr string) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_, _ = conn.Write([]byte("PING\r\n"))
			buf := make([]byte, 16)
			_ = conn.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := conn.Read(buf)
			conn.Close()
			if strings.HasPrefix(string(buf[:n]), "+PONG") {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	tb.Fatalf("redis-server on %s did not come up", addr)
}
