package adaptertest

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// NATSServer is a private nats-server with JetStream on file storage in a
// temp dir, for the tests that kill the broker (never the shared one).
type NATSServer struct {
	tb   testing.TB
	Port int
	dir  string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartNATS starts a private nats-server. It skips (or fails under
// IDEM_REQUIRE_SERVICES=1) when the binary is missing.
func StartNATS(tb testing.TB) *NATSServer {
	tb.Helper()
	if _, err := exec.LookPath("nats-server"); err != nil {
		testenv.Unavailable(tb, "nats-server binary", err)
	}
	s := &NATSServer{tb: tb, Port: testenv.FreePort(tb), dir: tb.TempDir()}
	s.Start()
	tb.Cleanup(s.Kill)
	return s
}

// URL is the nats:// URL of the private server.
func (s *NATSServer) URL() string {
	return "nats://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
}

// Start (re)starts the server on the same port and store directory and
// waits until it accepts connections.
func (s *NATSServer) Start() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return
	}
	logf := filepath.Join(s.dir, "nats.log")
	cmd := exec.Command("nats-server", "-a", "127.0.0.1", "-p", strconv.Itoa(s.Port),
		"-js", "-sd", filepath.Join(s.dir, "js"), "-l", logf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.tb.Fatalf("start nats-server: %v", err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(logf)
	s.tb.Fatalf("private nats-server on port %d did not come up:\n%s", s.Port, log)
}

// Kill stops the server with SIGKILL and waits for it to exit. Safe to call twice.
func (s *NATSServer) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}
