package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/idemtest/faultproxy"
	"github.com/idemkit/idem/internal/testenv"
)

var idemBin string

func TestMain(m *testing.M) {
	bin, cleanup, err := testenv.BuildIdem(filepath.Join("..", "..", "cmd", "idem"), true)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	idemBin = bin
	code := m.Run()
	cleanup()
	os.Exit(code)
}

// service counts effects per logical operation (the "op" of the JSON
// body), whatever key the request carries or lacks.
type service struct {
	srv     *httptest.Server
	mu      sync.Mutex
	effects map[int]int
}

func newService(t *testing.T) *service {
	s := &service{effects: map[int]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b struct {
			Op int `json:"op"`
		}
		if err := json.NewDecoder(r.Body).Decode(&b); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		s.mu.Lock()
		s.effects[b.Op]++
		s.mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"op":%d}`, b.Op)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

var listening = regexp.MustCompile(`listening on (http://[^,]+),`)

func startProxy(t *testing.T, upstream string) string {
	cmd := exec.Command(idemBin, "proxy", "--listen", "127.0.0.1:0", "--upstream", upstream, "--store", "memory:",
		"--upstream-timeout", "1500ms", "--read-timeout", "5s", "--anonymous-scope", "shared", "--log-level", "error")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("idem proxy did not start")
	}
	m := listening.FindStringSubmatch(sc.Text())
	if m == nil {
		t.Fatalf("startup line %q", sc.Text())
	}
	go io.Copy(io.Discard, out)
	return m[1]
}

// chaos switches faults on p at random (the same schedule as cmd/idem's
// TestClientChaos) until stop closes.
func chaos(p *faultproxy.Proxy, seed uint64, stop <-chan struct{}) (wait func()) {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			switch x := rng.IntN(100); {
			case x < 8:
				p.Set(faultproxy.BlackHole)
			case x < 16:
				p.Set(faultproxy.DropReplies)
			case x < 24:
				p.ResetAll()
			case x < 30:
				p.CutNextReply(rng.IntN(64))
			case x < 36:
				p.DropNextReply()
			case x < 46:
				p.SetLatency(time.Duration(rng.IntN(30)) * time.Millisecond)
			}
			select {
			case <-stop:
				p.Set(faultproxy.Pass)
				p.SetLatency(0)
				return
			case <-time.After(time.Duration(10+rng.IntN(50)) * time.Millisecond):
			}
			p.Set(faultproxy.Pass)
			p.SetLatency(0)
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(10+rng.IntN(40)) * time.Millisecond):
			}
		}
	}()
	return func() { <-done }
}

// outcome of one logical operation.
type outcome int

const (
	success outcome = iota
	unknown         // idemclient's OutcomeUnknownError
	failed          // any other error or answer
)

type row struct {
	name                            string
	ops                             int
	successes, unknowns, failures   int
	effects, duplicates, opsWithDup int
	attempts                        int64
	elapsed                         time.Duration
}

// run sends ops logical operations with do, 40 at a time, through a fresh
// rig, under chaos with fixed seeds.
func run(t *testing.T, name string, ops int, do func(ctx context.Context, base string, op int) outcome, attempts *atomic.Int64) row {
	svc := newService(t)
	u, _ := url.Parse(svc.srv.URL)
	upFault := faultproxy.New(t, u.Host)
	pu, _ := url.Parse(startProxy(t, "http://"+upFault.Addr()))
	cliFault := faultproxy.New(t, pu.Host)
	base := "http://" + cliFault.Addr()

	stop := make(chan struct{})
	w1, w2 := chaos(cliFault, 1, stop), chaos(upFault, 2, stop)
	results := make([]outcome, ops)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range 40 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= ops {
					return
				}
				results[i] = do(context.Background(), base, i)
			}
		})
	}
	wg.Wait()
	r := row{name: name, ops: ops, elapsed: time.Since(start), attempts: attempts.Load()}
	close(stop)
	w1()
	w2()
	for _, o := range results {
		switch o {
		case success:
			r.successes++
		case unknown:
			r.unknowns++
		default:
			r.failures++
		}
	}
	svc.mu.Lock()
	for _, n := range svc.effects {
		r.effects += n
		if n > 1 {
			r.duplicates += n - 1
			r.opsWithDup++
		}
	}
	svc.mu.Unlock()
	return r
}

func body(op int) string { return fmt.Sprintf(`{"op":%d}`, op) }

// TestSideBySide runs 2,000 logical POSTs under the same chaos with
// idemclient, with go-retryablehttp as its users call it (no key), and
// with go-retryablehttp given a key by hand, and reports each one's
// outcomes and duplicate effects. Only idemclient's row is asserted (0
// duplicates); the others are measured.
func TestSideBySide(t *testing.T) {
	const ops = 2000
	var rows []row

	{ // idemclient
		var attempts atomic.Int64
		base := &http.Transport{MaxIdleConnsPerHost: 40}
		budget, _ := idemclient.NewBudget(1, 200)
		tr, err := idemclient.New(&idemclient.Config{Transport: base, MaxAttempts: 40, MaxElapsed: 40 * time.Second,
			AttemptTimeout: time.Second, BaseDelay: 20 * time.Millisecond, MaxDelay: 400 * time.Millisecond, Budget: budget,
			Observer: idemclient.ObserverFunc(func(_ context.Context, e idemclient.Event) {
				if e.Kind == idemclient.EventAttempt {
					attempts.Add(1)
				}
			})})
		if err != nil {
			t.Fatal(err)
		}
		c := &http.Client{Transport: tr}
		rows = append(rows, run(t, "idemclient", ops, func(ctx context.Context, base string, op int) outcome {
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/charges", strings.NewReader(body(op)))
			resp, err := c.Do(req)
			if errors.Is(err, idemclient.ErrOutcomeUnknown) {
				return unknown
			}
			if err != nil {
				return failed
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				return failed
			}
			return success
		}, &attempts))
		base.CloseIdleConnections()
	}

	for _, keyed := range []bool{false, true} {
		var attempts atomic.Int64
		rc := retryablehttp.NewClient()
		rc.Logger = log.New(io.Discard, "", 0)
		rc.RetryMax = 39 // 40 attempts, as idemclient's MaxAttempts
		rc.RetryWaitMin = 20 * time.Millisecond
		rc.RetryWaitMax = 400 * time.Millisecond
		rc.HTTPClient.Timeout = time.Second // its per-attempt timeout
		rc.HTTPClient.Transport.(*http.Transport).MaxIdleConnsPerHost = 40
		rc.RequestLogHook = func(_ retryablehttp.Logger, _ *http.Request, _ int) { attempts.Add(1) }
		name := "go-retryablehttp (no key)"
		if keyed {
			name = "go-retryablehttp + key set by hand"
		}
		rows = append(rows, run(t, name, ops, func(ctx context.Context, base string, op int) outcome {
			req, _ := retryablehttp.NewRequestWithContext(ctx, http.MethodPost, base+"/charges", strings.NewReader(body(op)))
			if keyed {
				req.Header.Set("Idempotency-Key", idemclient.NewKey())
			}
			resp, err := rc.Do(req)
			if err != nil {
				return failed
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				return failed
			}
			return success
		}, &attempts))
		rc.HTTPClient.CloseIdleConnections()
	}

	t.Logf("| client | ops | successes | outcome-unknown (typed) | other failures | effects | duplicate effects | ops with a duplicate | attempts / op | wall |")
	t.Logf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		t.Logf("| %s | %d | %d | %d | %d | %d | **%d** | %d | %.2f | %.1fs |", r.name, r.ops, r.successes, r.unknowns, r.failures, r.effects, r.duplicates, r.opsWithDup, float64(r.attempts)/float64(r.ops), r.elapsed.Seconds())
	}
	if r := rows[0]; r.duplicates != 0 || r.failures != 0 {
		t.Errorf("idemclient: %d duplicates, %d failures that are neither success nor outcome-unknown", r.duplicates, r.failures)
	}
}
