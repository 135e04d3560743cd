package main

// End-to-end tests of the real idem binary (built by TestMain) in front of a
// counting upstream that runs in the test process.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
)

// upstream is a service that counts executions per Idempotency-Key and can
// hold a key's first execution until the test lets it go.
type upstream struct {
	srv *httptest.Server

	mu      sync.Mutex
	calls   map[string]int
	holds   map[string]chan struct{} // key → closed to let the first call go
	started map[string]chan struct{} // key → closed when its first call arrived
	rawKeys []string
	reexec  []string     // Idempotency-Reexecution of each call
	ctxErrs atomic.Int64 // requests whose context ended before the answer
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{calls: map[string]int{}, holds: map[string]chan struct{}{}, started: map[string]chan struct{}{}}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw := r.Header.Get("Idempotency-Key")
		key := raw
		if id, err := httpidem.ParseKey(raw); err == nil {
			key = id // counted per key, whatever its spelling
		}
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.calls[key]++
		n := u.calls[key]
		u.rawKeys = append(u.rawKeys, raw)
		u.reexec = append(u.reexec, r.Header.Get("Idempotency-Reexecution"))
		hold, st := u.holds[key], u.started[key]
		u.mu.Unlock()
		if n == 1 && hold != nil {
			close(st)
			<-hold
			if r.Context().Err() != nil {
				u.ctxErrs.Add(1)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Execution", strconv.Itoa(n))
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"key":%q,"execution":%d,"body":%q}`, key, n, body)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

// hold makes key's first execution wait; it returns a channel closed when
// that execution started and a func that lets it finish.
func (u *upstream) hold(key string) (started <-chan struct{}, release func()) {
	u.mu.Lock()
	defer u.mu.Unlock()
	h, s := make(chan struct{}), make(chan struct{})
	u.holds[key], u.started[key] = h, s
	var once sync.Once
	return s, func() { once.Do(func() { close(h) }) }
}

func (u *upstream) count(key string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.calls[key]
}

// proxy is one running idem proxy process.
type proxy struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	admin  string
	line   string // the startup line
	stderr *syncBuffer
	done   chan struct{}
	err    error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var startupLine = regexp.MustCompile(`listening on (http://[^,]+),.*?(?:admin (http://\S+))?$`)

// startProxy runs the binary with args (plus --listen on a free port) and
// waits for its startup line.
func startProxy(t *testing.T, args ...string) *proxy {
	t.Helper()
	cmd := exec.Command(idemBin, append([]string{"proxy", "--listen", "127.0.0.1:0"}, args...)...)
	p := &proxy{t: t, cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		io.Copy(io.Discard, out)
	}()
	go func() { p.err = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("proxy %v stderr:\n%s", args, p.stderr)
		}
	})
	select {
	case l, ok := <-lines:
		m := startupLine.FindStringSubmatch(l)
		if !ok || m == nil {
			<-p.done
			t.Fatalf("proxy did not start (%q): %v\n%s", l, p.err, p.stderr)
		}
		p.line, p.url, p.admin = l, m[1], m[2]
	case <-time.After(60 * time.Second):
		t.Fatalf("proxy did not start within a minute:\n%s", p.stderr)
	}
	return p
}

func (p *proxy) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// exitCode waits for the process and returns its exit status.
func (p *proxy) exitCode() int {
	select {
	case <-p.done:
	case <-time.After(90 * time.Second):
		p.t.Fatal("proxy did not exit")
	}
	return p.cmd.ProcessState.ExitCode()
}

type answer struct {
	status   int
	body     string
	replayed bool
	header   http.Header
	err      error
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 60 * time.Second}

func send(ctx context.Context, base, key, body string, hdr ...string) answer {
	r, err := http.NewRequestWithContext(ctx, "POST", base+"/charges?x=1", strings.NewReader(body))
	if err != nil {
		return answer{err: err}
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	// Every request has a caller unless the test names the headers.
	r.Header.Set("Authorization", "Bearer test-caller")
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			r.Header.Del(hdr[i])
			continue
		}
		r.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := client.Do(r)
	if err != nil {
		return answer{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true", header: resp.Header, err: err}
}

func post(t *testing.T, base, key, body string, hdr ...string) answer {
	t.Helper()
	a := send(context.Background(), base, key, body, hdr...)
	if a.err != nil {
		t.Fatalf("POST %s key %q: %v", base, key, a.err)
	}
	return a
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func sqliteDSN(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "idem.db") }

// TestE2EProxyBasics walks the semantics table through the real binary on
// an in-memory store, and checks what the proxy adds: the key reaches the
// service unchanged, keyless requests pass and are counted, the admin
// endpoints answer, and the startup line hides the store's password.
func TestE2EProxyBasics(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:", "--admin", "127.0.0.1:0")

	first := post(t, p.url, `"k-1"`, "amount=42")
	if first.status != 201 || first.replayed || !strings.Contains(first.body, `"execution":1`) {
		t.Fatalf("first: %+v", first)
	}
	again := post(t, p.url, `"k-1"`, "amount=42")
	if again.status != 201 || !again.replayed || again.body != first.body || again.header.Get("X-Execution") != "1" {
		t.Fatalf("replay: %+v", again)
	}
	if a := post(t, p.url, `k-1`, "amount=43"); a.status != 422 || a.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("other body: %+v", a)
	}
	if a := post(t, p.url, strings.Repeat("k", 256), "x"); a.status != 400 {
		t.Fatalf("long key: %+v", a)
	}
	started, release := up.hold("k-2")
	var wg sync.WaitGroup
	var slow answer
	wg.Go(func() { slow = post(t, p.url, "k-2", "a") })
	<-started
	if a := post(t, p.url, "k-2", "a"); a.status != 409 || a.header.Get("Retry-After") == "" {
		t.Fatalf("in flight: %+v", a)
	}
	release()
	wg.Wait()
	if slow.status != 201 {
		t.Fatalf("slow: %+v", slow)
	}
	// Keyless requests pass through, unprotected, and are counted.
	post(t, p.url, "", "a")
	post(t, p.url, "", "a")
	if n := up.count(""); n != 2 {
		t.Fatalf("keyless executions %d", n)
	}
	// The spelling the service sees: TestE2EForwardedKeyHeaders.
	if code, body := get(t, p.admin+"/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz: %d %q", code, body)
	}
	if code, _ := get(t, p.admin+"/readyz"); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	_, metrics := get(t, p.admin+"/metrics")
	for _, want := range []string{`idem_http_requests_total{outcome="keyless"} 2`, `idem_http_requests_total{outcome="replayed"} 1`,
		`idem_http_requests_total{outcome="in_flight"} 1`, `idem_http_store_duration_seconds_count{op="begin"}`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if up.count("k-1") != 1 {
		t.Fatalf("k-1 ran %d times", up.count("k-1"))
	}
	// A keyed request from no caller reaches nothing.
	if a := post(t, p.url, "anon", "a", "Authorization", ""); a.status != 400 || !strings.Contains(a.body, "scope-required") || up.count("anon") != 0 {
		t.Fatalf("anonymous: %+v", a)
	}
}

// TestE2EClientGoneUpstreamNotCancelled: the client times out while the
// service works; the service's call is not cancelled, its result is
// stored, and the retry replays it.
func TestE2EClientGoneUpstreamNotCancelled(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", sqliteDSN(t))
	started, release := up.hold("gone")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan answer)
	go func() { done <- send(ctx, p.url, "gone", "a") }()
	<-started
	cancel()
	if a := <-done; a.err == nil {
		t.Fatalf("the client was not cancelled: %+v", a)
	}
	time.Sleep(100 * time.Millisecond) // let the proxy see the disconnect before the service answers
	release()
	var a answer
	poll(t, "the stored result", func() bool { a = post(t, p.url, "gone", "a"); return a.status != 409 })
	if a.status != 201 || !a.replayed || up.count("gone") != 1 || up.ctxErrs.Load() != 0 {
		t.Fatalf("retry %+v, executions %d, upstream contexts cancelled %d", a, up.count("gone"), up.ctxErrs.Load())
	}
}

// TestE2ETwoProxiesOnePostgres: 200 concurrent duplicates spread over two
// proxy processes sharing one PostgreSQL: the service runs once.
func TestE2ETwoProxiesOnePostgres(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.PostgresDB(t)
	up := newUpstream(t)
	a := startProxy(t, "--upstream", up.srv.URL, "--store", dsn)
	b := startProxy(t, "--upstream", up.srv.URL, "--store", dsn)
	if !strings.Contains(a.line, "store postgres://") {
		t.Fatalf("startup line %q", a.line)
	}
	const n = 200
	_, release := up.hold("pg-dup")
	var conflicts, unavailable atomic.Int64
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		base := a.url
		if i%2 == 1 {
			base = b.url
		}
		wg.Go(func() {
			// A 503 store-unavailable (the shared PostgreSQL out of
			// connections while other packages' tests run) is answered
			// by retrying after Retry-After, as a client would: it
			// decided nothing, so the counts below still hold.
			for try := 0; ; try++ {
				answers[i] = send(context.Background(), base, "pg-dup", "same body")
				if answers[i].status != http.StatusServiceUnavailable || try == 20 {
					break
				}
				unavailable.Add(1)
				time.Sleep(200 * time.Millisecond)
			}
			if answers[i].status == 409 && conflicts.Add(1) == n-1 {
				release()
			}
		})
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() { // never hang the test if the counts are wrong
		select {
		case <-stop:
		case <-time.After(90 * time.Second):
			release()
		}
	}()
	wg.Wait()
	release()
	if c := up.count("pg-dup"); c != 1 {
		t.Fatalf("the service ran %d times", c)
	}
	var n201, n409 int
	for _, ans := range answers {
		switch {
		case ans.err != nil:
			t.Fatalf("request failed: %v", ans.err)
		case ans.status == 201:
			n201++
		case ans.status == 409:
			n409++
		default:
			t.Fatalf("unexpected answer %+v", ans)
		}
	}
	if n201 != 1 || n409 != n-1 {
		t.Fatalf("%d×201 %d×409", n201, n409)
	}
	if u := unavailable.Load(); u > 0 {
		t.Logf("%d answers were 503 store-unavailable and retried", u)
	}
	for _, base := range []string{a.url, b.url} {
		if r := post(t, base, "pg-dup", "same body"); r.status != 201 || !r.replayed {
			t.Fatalf("replay via %s: %+v", base, r)
		}
	}
}

// TestE2ECrashTakeover: a proxy is SIGKILLed while the service works on a
// request it forwarded. Retries get 409 until the lease runs out. Then, in
// hold mode (the default), the takeover finds the claim marked as
// forwarded and does not forward again: the key is held as
// outcome-unknown, replayed by every proxy. In release mode the takeover
// forwards again, telling the service it may be a re-execution.
func TestE2ECrashTakeover(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"hold", "release"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			store := sqliteDSN(t)
			up := newUpstream(t)
			args := []string{"--upstream", up.srv.URL, "--store", store, "--lease", "2s", "--unknown-outcome", mode}
			a := startProxy(t, args...)
			b := startProxy(t, args...)
			started, release := up.hold("crash")
			defer release()
			done := make(chan answer, 1)
			go func() { done <- send(context.Background(), a.url, "crash", "x") }()
			<-started
			a.kill()
			if ans := <-done; ans.err == nil {
				t.Fatalf("the client of the killed proxy got an answer: %+v", ans)
			}
			release() // the service finishes; nobody stores its answer
			// The dead owner's lease still runs: a retry is told to wait.
			if ans := post(t, b.url, "crash", "x"); ans.status != 409 {
				t.Fatalf("retry right after the crash: %+v", ans)
			}
			var ans answer
			poll(t, "the takeover", func() bool { ans = post(t, b.url, "crash", "x"); return ans.status != 409 })
			a2 := startProxy(t, args...) // the restarted proxy
			r := post(t, a2.url, "crash", "x")
			up.mu.Lock()
			reexec := slices.Clone(up.reexec)
			up.mu.Unlock()
			switch mode {
			case "hold":
				if ans.status != 502 || ans.replayed || !strings.Contains(ans.body, "outcome-unknown") {
					t.Fatalf("after the lease: %+v", ans)
				}
				if r.status != 502 || !r.replayed || r.body != ans.body {
					t.Fatalf("restarted proxy: %+v", r)
				}
				if c := up.count("crash"); c != 1 {
					t.Fatalf("executions %d, want 1", c)
				}
			case "release":
				if ans.status != 201 || ans.replayed || !strings.Contains(ans.body, `"execution":2`) {
					t.Fatalf("after the lease: %+v", ans)
				}
				if r.status != 201 || !r.replayed || r.body != ans.body {
					t.Fatalf("restarted proxy: %+v", r)
				}
				if c := up.count("crash"); c != 2 || !slices.Equal(reexec, []string{"", "true"}) {
					t.Fatalf("executions %d, Idempotency-Reexecution %q; want 2, [\"\" true]", c, reexec)
				}
			}
		})
	}
}

// TestE2EStoreOutage: with Redis as the store, requests get 503 while it
// is down and service recovers when it returns.
func TestE2EStoreOutage(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", rs.URL(), "--admin", "127.0.0.1:0")
	if a := post(t, p.url, "before", "x"); a.status != 201 {
		t.Fatalf("before: %+v", a)
	}
	rs.Kill()
	a := post(t, p.url, "during", "x")
	if a.status != 503 || a.header.Get("Retry-After") == "" || !strings.Contains(a.body, "store-unavailable") {
		t.Fatalf("during the outage: %+v", a)
	}
	if code, _ := get(t, p.admin+"/readyz"); code != 503 {
		t.Fatalf("readyz during the outage: %d", code)
	}
	if up.count("during") != 0 {
		t.Fatal("the service ran without protection")
	}
	rs.Start()
	var ans answer
	poll(t, "recovery", func() bool { ans = post(t, p.url, "during", "x"); return ans.status != 503 })
	if ans.status != 201 || ans.replayed {
		t.Fatalf("after the outage: %+v", ans)
	}
	if r := post(t, p.url, "during", "x"); !r.replayed || up.count("during") != 1 {
		t.Fatalf("replay after recovery: %+v (executions %d)", r, up.count("during"))
	}
	if code, _ := get(t, p.admin+"/readyz"); code != 200 {
		t.Fatalf("readyz after: %d", code)
	}
}

// TestE2ECacheLoss: a tiered store (Redis cache in front of SQLite) loses
// its cache mid-run: retries still replay and new keys still run once.
func TestE2ECacheLoss(t *testing.T) {
	t.Parallel()
	rs := testenv.StartRedis(t)
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", sqliteDSN(t), "--cache", rs.URL())
	if !strings.Contains(p.line, "cache redis://") {
		t.Fatalf("startup line %q", p.line)
	}
	first := post(t, p.url, "c-1", "x")
	if r := post(t, p.url, "c-1", "x"); first.status != 201 || !r.replayed {
		t.Fatalf("with the cache: %+v %+v", first, r)
	}
	rs.Kill()
	if r := post(t, p.url, "c-1", "x"); r.status != 201 || !r.replayed || r.body != first.body {
		t.Fatalf("replay without the cache: %+v", r)
	}
	const n = 20
	var wg sync.WaitGroup
	answers := make([]answer, n)
	for i := range n {
		wg.Go(func() { answers[i] = send(context.Background(), p.url, "c-2", "y") })
	}
	wg.Wait()
	for _, a := range answers {
		if a.err != nil || (a.status != 201 && a.status != 409) {
			t.Fatalf("without the cache: %+v", a)
		}
	}
	var r answer
	poll(t, "c-2's result", func() bool { r = post(t, p.url, "c-2", "y"); return r.status != 409 })
	if !r.replayed || up.count("c-2") != 1 || up.count("c-1") != 1 {
		t.Fatalf("c-2 %+v; executions c-1 %d c-2 %d", r, up.count("c-1"), up.count("c-2"))
	}
}

// TestE2ESigterm: SIGTERM during a request: the proxy stops accepting,
// the request completes and its result is stored (a new proxy replays
// it), and the process exits 0.
func TestE2ESigterm(t *testing.T) {
	t.Parallel()
	store := sqliteDSN(t)
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", store)
	started, release := up.hold("term")
	defer release()
	done := make(chan answer, 1)
	go func() { done <- send(context.Background(), p.url, "term", "x") }()
	<-started
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(p.url, "http://")
	poll(t, "the listener to close", func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	})
	select {
	case <-p.done:
		t.Fatal("the proxy exited with a request in flight")
	default:
	}
	release()
	if a := <-done; a.err != nil || a.status != 201 || a.replayed {
		t.Fatalf("in-flight request: %+v", a)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("exit code %d\n%s", code, p.stderr)
	}
	p2 := startProxy(t, "--upstream", up.srv.URL, "--store", store)
	if r := post(t, p2.url, "term", "x"); r.status != 201 || !r.replayed {
		t.Fatalf("after restart: %+v", r)
	}
	if up.count("term") != 1 {
		t.Fatalf("executions %d", up.count("term"))
	}
}

// TestE2EStartupLineRedactsPassword: the DSN's password never appears.
func TestE2EStartupLineRedactsPassword(t *testing.T) {
	t.Parallel()
	_, dsn := testenv.PostgresDB(t)
	withPW := strings.Replace(dsn, "postgres://postgres@", "postgres://postgres:s3cr3tpw@", 1)
	if withPW == dsn {
		t.Skip("IDEM_TEST_POSTGRES has another user; cannot add a password")
	}
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", withPW)
	if strings.Contains(p.line, "s3cr3tpw") || !strings.Contains(p.line, "xxxxx") {
		t.Fatalf("startup line %q", p.line)
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	p.exitCode()
	if strings.Contains(p.stderr.String(), "s3cr3tpw") {
		t.Fatalf("stderr leaks the password:\n%s", p.stderr)
	}
}

// TestE2EUpstreamClosesAfterRequest: the service reads the request, acts
// and drops the connection without an answer. The outcome is unknown: in
// hold mode the client and every retry get 502 outcome-unknown and the
// service is not called again; in release mode the retry runs.
func TestE2EUpstreamClosesAfterRequest(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"hold", "release"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			var calls atomic.Int64
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.ReadAll(r.Body)
				if calls.Add(1) == 1 {
					c, _, err := http.NewResponseController(w).Hijack()
					if err == nil {
						c.Close() // a transport failure, not an HTTP answer
					}
					return
				}
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, "second try")
			}))
			defer up.Close()
			p := startProxy(t, "--upstream", up.URL, "--store", "memory:", "--unknown-outcome", mode)
			first := post(t, p.url, "tf", "x")
			if first.status != 502 || first.replayed || !strings.Contains(first.body, "outcome-unknown") || first.header.Get("Cache-Control") != "no-store" {
				t.Fatalf("closed without an answer: %+v", first)
			}
			again := post(t, p.url, "tf", "x")
			switch mode {
			case "hold":
				if again.status != 502 || !again.replayed || again.body != first.body || calls.Load() != 1 {
					t.Fatalf("retry %+v after %d calls", again, calls.Load())
				}
			case "release":
				if first.header.Get("Retry-After") == "" || again.status != 201 || again.body != "second try" || calls.Load() != 2 {
					t.Fatalf("first %+v, retry %+v after %d calls", first, again, calls.Load())
				}
			}
		})
	}
}
