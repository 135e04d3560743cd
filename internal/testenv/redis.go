package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// RedisServer is a private redis-server on a free loopback port, for tests that
// kill, flush or restart Redis. It is stopped when the test ends.
type RedisServer struct {
	tb   testing.TB
	Port int
	dir  string

	// Extra are more redis-server arguments, used by the next Start (a
	// replica's --replicaof, for example).
	Extra []string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartRedis starts a private redis-server. It skips (or fails under
// IDEM_REQUIRE_SERVICES=1) when the binary is missing.
func StartRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	s := NewRedis(tb)
	s.Start()
	return s
}

// NewRedis is StartRedis without the start: set Extra, then call Start.
func NewRedis(tb testing.TB) *RedisServer {
	tb.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(tb, "redis-server binary", err)
	}
	s := &RedisServer{tb: tb, Port: FreePort(tb), dir: tb.TempDir()}
	tb.Cleanup(s.Kill)
	return s
}

// Addr is host:port of the private server.
func (s *RedisServer) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)) }

// URL is the redis:// URL of the private server.
func (s *RedisServer) URL() string { return "redis://" + s.Addr() + "/0" }

// Start (re)starts the server on the same port and waits until it answers.
func (s *RedisServer) Start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	cmd := exec.Command("redis-server",
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir,
		"--logfile", filepath.Join(s.dir, "redis.log"))
	cmd.Args = append(cmd.Args, s.Extra...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start redis-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr(), 200*time.Millisecond)
		if err == nil {
			_, _ = fmt.Fprint(c, "PING\r\n")
			buf := make([]byte, 16)
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := c.Read(buf)
			c.Close()
			if n > 0 && string(buf[:n]) == "+PONG\r\n" {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	s.tb.Fatalf("private redis-server on %s did not come up:\n%s", s.Addr(), log)
}

// Kill stops the server with SIGKILL and waits for it to exit. Safe to call twice.
func (s *RedisServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server and starts an empty one on the same port.
func (s *RedisServer) Restart() {
	s.Kill()
	s.Start()
}
