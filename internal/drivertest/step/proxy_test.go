package step_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/testenv"
)

// idemBin is the idem binary, built once per test binary by the first
// test that runs it (testenv.BuildIdem: a race build in a race test
// binary, its packages from the build cache, or $IDEM_TEST_RACE_BINARY),
// so that a run of the benchmarks alone builds nothing. TestMain removes
// it.
var idemBin struct {
	once    sync.Once
	path    string
	cleanup func()
	err     error
}

func idemBinary(t testing.TB) string {
	t.Helper()
	idemBin.once.Do(func() {
		idemBin.path, idemBin.cleanup, idemBin.err = testenv.BuildIdem(filepath.Join("..", "..", "..", "cmd", "idem"), true)
	})
	if idemBin.err != nil {
		t.Fatal(idemBin.err)
	}
	return idemBin.path
}

type chargeRequest struct {
	Order string `json:"order"`
}

type chargeAnswer struct {
	Charge string `json:"charge"`
}

// chargeService is the payment service of the charge step, behind a real
// idem proxy: it charges every request that reaches it, whatever key it
// carries or lacks (so that a charge doubled by the proxy, the client or
// the step shows), keeps the Idempotency-Key each came with, and answers
// each with a new charge id.
type chargeService struct {
	proxy string // idem proxy's URL

	mu   sync.Mutex
	n    int
	keys map[string][]string // by order: the key of each charge
}

// newChargeService starts the service and an idem proxy in front of it
// (its records in a SQLite file, as a sidecar's default store keeps
// them), both stopped when t ends.
func newChargeService(t *testing.T) *chargeService {
	t.Helper()
	s := &chargeService{keys: make(map[string][]string)}
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(srv.Close)
	s.proxy = startProxy(t, "--upstream", srv.URL, "--store", "sqlite:"+filepath.Join(t.TempDir(), "proxy.db"), "--log-level", "error")
	return s
}

func (s *chargeService) serve(w http.ResponseWriter, r *http.Request) {
	var req chargeRequest
	if r.Method != http.MethodPost || r.URL.Path != "/charges" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Order == "" {
		http.Error(w, "want POST /charges with an order", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.n++
	id := fmt.Sprintf("ch-%d", s.n)
	s.keys[req.Order] = append(s.keys[req.Order], r.Header.Get("Idempotency-Key"))
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(w).Encode(chargeAnswer{Charge: id})
}

// charges returns the keys of the charges of order that reached the
// service, one per charge.
func (s *chargeService) charges(order string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys[order]...)
}

// startProxy runs `idem proxy --listen 127.0.0.1:0` with args and returns
// the URL it listens on, from its first line. It is killed when t ends.
func startProxy(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(idemBinary(t), append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr // a race report of the race-built proxy shows
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start idem proxy: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sc.Scan()
		first <- sc.Text()
		_, _ = io.Copy(io.Discard, out) // until the kill closes it
	}()
	select {
	case line := <-first:
		_, rest, ok := strings.Cut(line, " listening on ")
		url, _, _ := strings.Cut(rest, ",")
		if !ok || !strings.HasPrefix(url, "http://") {
			t.Fatalf("idem proxy's first line %q names no URL", line)
		}
		return url
	case <-time.After(time.Minute):
		t.Fatal("idem proxy printed nothing within a minute")
		return ""
	}
}
