package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemkit/idem/cmd/idem/internal/apicheck"
	"github.com/idemkit/idem/internal/testenv"
)

var (
	demoUpstreamOnce sync.Once
	demoUpstreamBin  string
	demoUpstreamErr  error
)

// startDemoUpstream builds (once) and runs the demo upstream of
// cmd/idem/internal/httpbench/upstream on a free port, and returns its URL.
func startDemoUpstream(t *testing.T) string {
	t.Helper()
	demoUpstreamOnce.Do(func() {
		src, err := filepath.Abs(filepath.Join("internal", "httpbench", "upstream"))
		if err != nil {
			demoUpstreamErr = err
			return
		}
		demoUpstreamBin = filepath.Join(filepath.Dir(idemBin), "demo-upstream")
		out, err := exec.Command("go", "build", "-C", src, "-o", demoUpstreamBin, ".").CombinedOutput()
		if err != nil {
			demoUpstreamErr = fmt.Errorf("building the demo upstream: %v\n%s", err, out)
		}
	})
	if demoUpstreamErr != nil {
		t.Fatal(demoUpstreamErr)
	}
	cmd := exec.Command(demoUpstreamBin, "-listen", "127.0.0.1:0")
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }() //nolint:errcheck // killed at the end
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGKILL); <-done })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			if m := regexp.MustCompile(`listening on (http://\S+)`).FindStringSubmatch(sc.Text()); m != nil {
				lines <- m[1]
			}
		}
		close(lines)
	}()
	select {
	case u, ok := <-lines:
		if !ok {
			t.Fatal("the demo upstream did not start")
		}
		return u
	case <-time.After(60 * time.Second):
		t.Fatal("the demo upstream did not start within a minute")
	}
	return ""
}

// recordTraffic runs a real proxy with --record in front of the demo
// upstream, sends keyed requests of two callers (some retried), stops the
// proxy with SIGTERM and returns the recording's path and its text.
func recordTraffic(t *testing.T) (string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "traffic.ndjson")
	p := startProxy(t, "--upstream", startDemoUpstream(t), "--store", "memory:", "--record", file,
		"--scope-header", "X-Api-Key", "--scope-header", "Authorization")
	for i := range 12 {
		caller := []string{"alice", "bob"}[i%2]
		hdr := []string{"X-Api-Key", "secret-key-of-" + caller, "Authorization", "Bearer token-of-" + caller}
		body := fmt.Sprintf(`{"amount":%d,"reference":"order-%d"}`, 100+i, i)
		a := post(t, p.url, fmt.Sprintf("order-%d", i), body, hdr...)
		if a.status != http.StatusCreated {
			t.Fatalf("order-%d: %d %s", i, a.status, a.body)
		}
		if i%3 == 0 { // the client's own retry: a second record of one operation
			if a := post(t, p.url, fmt.Sprintf("order-%d", i), body, hdr...); !a.replayed {
				t.Fatalf("order-%d retry not replayed: %d", i, a.status)
			}
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := p.exitCode(); code != 0 {
		t.Fatalf("proxy exit %d\n%s", code, p.stderr)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, string(b)
}

// credentialsFor maps every placeholder of a recording to a staging value.
func credentialsFor(t *testing.T, recording string) string {
	t.Helper()
	m := map[string]string{}
	for _, ph := range regexp.MustCompile(`\{\{[a-z0-9-]+\}\}`).FindAllString(recording, -1) {
		m[ph] = "staging " + strings.Trim(ph, "{}")
	}
	b, _ := json.Marshal(m)
	file := filepath.Join(t.TempDir(), "credentials.json")
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestRecordNeverHoldsCredentials: a recording made through the real
// proxy has every keyed request, and placeholders where the credentials
// were: the same for one caller, different for two.
func TestRecordNeverHoldsCredentials(t *testing.T) {
	t.Parallel()
	file, text := recordTraffic(t)
	for _, secret := range []string{"secret-key-of", "token-of", "Bearer"} {
		if strings.Contains(text, secret) {
			t.Fatalf("the recording holds %q:\n%s", secret, text)
		}
	}
	f, _ := os.Open(file)
	defer f.Close()
	recs, err := apicheck.ReadRecords(file, f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 16 { // 12 requests, 4 retries
		t.Fatalf("%d records, want 16", len(recs))
	}
	byCaller := map[string]map[string]bool{}
	for i, r := range recs {
		if r.Method != "POST" || r.Path != "/charges" || r.Key == "" || r.Status != http.StatusCreated || r.Body == "" {
			t.Fatalf("record %d: %+v", i, r)
		}
		ak, auth := r.Headers["X-Api-Key"], r.Headers["Authorization"]
		if !apicheck.IsPlaceholder(ak) || !apicheck.IsPlaceholder(auth) {
			t.Fatalf("record %d headers %v", i, r.Headers)
		}
		if byCaller[r.Scope] == nil {
			byCaller[r.Scope] = map[string]bool{}
		}
		byCaller[r.Scope][ak+auth] = true
	}
	if len(byCaller) != 2 {
		t.Fatalf("%d scopes, want 2 callers", len(byCaller))
	}
	for s, phs := range byCaller {
		if len(phs) != 1 {
			t.Fatalf("caller %s has placeholders %v, want one set", s, phs)
		}
	}
	if !strings.Contains(text, `"replayed":true`) {
		t.Fatal("the client's retries are not recorded as replays")
	}
}

// TestReplayDuplicateStorm: the recording, replayed with copies, shuffled
// and concurrent, has no duplicate effect with idem in front of the demo
// upstream, and duplicates for every operation without it, each listed
// with its requests. The HTML report renders in headless Chromium.
func TestReplayDuplicateStorm(t *testing.T) {
	t.Parallel()
	file, text := recordTraffic(t)
	creds := credentialsFor(t, text)
	args := func(target string, extra ...string) []string {
		return append([]string{"replay", file, "--target", target, "--copies", "4", "--concurrency", "8",
			"--delay", "50ms", "--credentials", creds, "--rate", "500"}, extra...)
	}

	// With idem in front: zero duplicate effects.
	p := startProxy(t, "--upstream", startDemoUpstream(t), "--store", sqliteDSN(t), "--scope-header", "X-Api-Key", "--scope-header", "Authorization")
	code, out, errOut := runCLI(t, args(p.url, "--oracle", "id:/charge", "--json")...)
	if code != 0 {
		t.Fatalf("with idem: exit %d\n%s\n%s", code, out, errOut)
	}
	var rep apicheck.ReplayReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates != 0 || len(rep.Operations) != 12 || rep.Answers[apicheck.AnswerReplayed] == 0 || rep.Requests != 64 {
		t.Fatalf("with idem: %+v", rep)
	}
	for _, op := range rep.Operations {
		if op.Effects != 1 || op.Sent != 4*op.Recorded {
			t.Fatalf("with idem: operation %+v", op)
		}
	}
	if !strings.Contains(errOut, "sent 64/64") || !strings.Contains(errOut, "0 with more than one effect") {
		t.Fatalf("progress and summary:\n%s", errOut)
	}

	// Without it: every operation executed again, listed with its requests.
	report := filepath.Join(t.TempDir(), "replay.html")
	direct := startDemoUpstream(t)
	code, out, errOut = runCLI(t, args(direct, "--oracle", "id:/charge", "--report", report)...)
	if code != 1 || !strings.Contains(errOut, "12 of 12 operations had more than one effect") {
		t.Fatalf("without idem: exit %d\n%s\n%s", code, out, errOut)
	}
	if n := strings.Count(out, "DUPLICATE  POST /charges key h-"); n != 12 {
		t.Fatalf("%d duplicates listed, want 12:\n%s", n, out)
	}
	if !strings.Contains(out, "→ 201  {\"charge\":\"ch_") {
		t.Fatalf("the duplicates' requests are not shown:\n%s", out)
	}

	// A counting oracle, operation by operation, finds them too.
	code, out, errOut = runCLI(t, args(startDemoUpstream(t), "--oracle", "count:/stats#/charges", "--copies", "2", "--json")...)
	if code != 1 {
		t.Fatalf("count oracle: exit %d\n%s", code, errOut)
	}
	rep = apicheck.ReplayReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	for _, op := range rep.Operations {
		if op.Effects != int64(2*op.Recorded) || !op.Duplicate {
			t.Fatalf("count oracle: %+v", op)
		}
	}

	dom := renderDOM(t, report)
	if m := regexp.MustCompile(`id="verdict" data-duplicates="(\d+)"`).FindStringSubmatch(dom); m == nil || m[1] != "12" {
		t.Fatalf("rendered verdict: %v", m)
	}
	if n := strings.Count(dom, `class="operation"`); n != 12 {
		t.Fatalf("%d operation rows rendered, want 12", n)
	}
	var total float64
	for _, m := range regexp.MustCompile(`<rect [^>]*width="([0-9.]+)"`).FindAllStringSubmatch(dom, -1) {
		w, _ := strconv.ParseFloat(m[1], 64)
		total += w
	}
	if total < 599 || total > 601 {
		t.Fatalf("the answer bars are %.1f wide, want 600", total)
	}
	page, _ := os.ReadFile(report)
	if bytes.Contains(page, []byte("<script")) || bytes.Contains(page, []byte("staging ")) {
		t.Fatal("the report has a script or shows a credential")
	}
}

// renderDOM loads file in headless Chromium and returns the rendered DOM
// (the approach of examples/shop's report test).
func renderDOM(t *testing.T, file string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := testenv.Chromium(ctx, t, "--dump-dom", "file://"+file)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, errb.String())
	}
	return out.String()
}

// TestReplayRefuses: placeholders without a value, a budget too small,
// and redirects are refused; nothing goes to another origin.
func TestReplayRefuses(t *testing.T) {
	t.Parallel()
	var hits int
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits++
		mu.Unlock()
		http.Redirect(w, r, "http://elsewhere.invalid/x", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "r.ndjson")
	rec := `{"t":"2026-01-01T00:00:00Z","method":"POST","path":"/charges","key":"k1","scope":"s","headers":{"Authorization":"{{authorization-1}}"},"body":"{}","status":201}` + "\n"
	if err := os.WriteFile(file, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "replay", file, "--target", srv.URL); code != 2 || !strings.Contains(errOut, "no value for {{authorization-1}}") {
		t.Fatalf("missing credentials: exit %d %q", code, errOut)
	}
	creds := filepath.Join(t.TempDir(), "c.json")
	os.WriteFile(creds, []byte(`{"{{authorization-1}}":"Bearer x"}`), 0o600)
	if code, _, errOut := runCLI(t, "replay", file, "--target", srv.URL, "--credentials", creds, "--copies", "20", "--max-requests", "10"); code != 2 || !strings.Contains(errOut, "needs 20 requests") {
		t.Fatalf("budget: exit %d %q", code, errOut)
	}
	code, out, errOut := runCLI(t, "replay", file, "--target", srv.URL, "--credentials", creds, "--copies", "3")
	if code != 0 || !strings.Contains(out, "3 refused") {
		t.Fatalf("redirects: exit %d\n%s\n%s", code, out, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if hits != 3 {
		t.Fatalf("the server saw %d requests, want 3 (no redirect followed)", hits)
	}
	if code, _, _ := runCLI(t, "replay", file, "--target", "http://u:pw@h"); code != 2 {
		t.Fatal("a target with a password was accepted")
	}
}

// TestRecorderRotates: past the size cap the recording rotates, keeping
// --record-keep files; a body over the limit is marked omitted.
func TestRecorderRotates(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file := filepath.Join(dir, "rec.ndjson")
	o := proxyOptions{methods: []string{"POST"}, scopeHeaders: []string{"Authorization"}}
	rc, err := newRecorder(file, 2000, 2, o, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	h := rc.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := range 40 {
		body := strings.Repeat("x", 100)
		if i == 39 {
			body = strings.Repeat("y", recordBodyLimit+1)
		}
		req, _ := http.NewRequest("POST", srv.URL+"/p", strings.NewReader(body))
		req.Header.Set("Idempotency-Key", fmt.Sprintf(`"k%d"`, i))
		req.Header.Set("Authorization", "Bearer very-secret")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	var all []apicheck.Record
	for _, name := range []string{file + ".2", file + ".1", file} {
		st, err := os.Stat(name)
		if err != nil || st.Size() > 2000 {
			t.Fatalf("%s: %v, %v bytes", name, err, st)
		}
		b, _ := os.ReadFile(name)
		if bytes.Contains(b, []byte("very-secret")) {
			t.Fatal("a credential reached the recording")
		}
		recs, err := apicheck.ReadRecords(name, bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
	}
	if _, err := os.Stat(file + ".3"); err == nil {
		t.Fatal("more rotated files than --record-keep")
	}
	if last := all[len(all)-1]; !strings.HasPrefix(last.Key, "h-") || strings.Contains(last.Key, "k39") || !last.BodyOmitted || last.Body != "" || last.Headers["Authorization"] != "{{authorization-1}}" {
		t.Fatalf("last record %+v", last)
	}
	if len(all) >= 40 {
		t.Fatalf("%d records kept: the oldest were not rotated away", len(all))
	}
}

// webhookReceiver counts deliveries' effects; dedup makes it remember
// each Webhook-Id (atomically, under one lock) and answer a repeat with
// the first delivery's event.
type webhookReceiver struct {
	dedup bool
	mu    sync.Mutex
	seen  map[string]int
	n     int
}

func (h *webhookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	id := r.Header.Get("Webhook-Id")
	h.mu.Lock()
	ev, dup := h.seen[id]
	if !dup || !h.dedup {
		h.n++
		ev = h.n
		h.seen[id] = ev
	}
	h.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"event":%d}`, ev)
}

// TestReplayWebhookStream: a recorded stream of callbacks, keyed by the
// sender's delivery id, replayed to a receiver that deduplicates on it (no
// duplicate effect) and to one that does not (every delivery duplicated).
func TestReplayWebhookStream(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "webhooks.ndjson")
	var b strings.Builder
	for i := range 5 {
		fmt.Fprintf(&b, `{"t":"2026-01-01T00:00:0%dZ","method":"POST","path":"/hooks","key":"evt_%d","scope":"sender","headers":{"Content-Type":"application/json"},"body":"{\"type\":\"charge.succeeded\",\"n\":%d}","status":200}`+"\n", i, i, i)
	}
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dedup bool
		code  int
	}{{true, 0}, {false, 1}} {
		recv := &webhookReceiver{dedup: tc.dedup, seen: map[string]int{}}
		srv := httptest.NewServer(recv)
		code, out, errOut := runCLI(t, "replay", file, "--target", srv.URL, "--key-header", "Webhook-Id", "--same-keys",
			"--copies", "3", "--oracle", "id:/event", "--rate", "500", "--json")
		srv.Close()
		if _, ok := recv.seen["evt_0"]; !ok {
			t.Fatalf("the receiver did not get the delivery id as recorded: %v", recv.seen)
		}
		var rep apicheck.ReplayReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != tc.code {
			t.Fatalf("dedup %v: exit %d, %v\n%s", tc.dedup, code, err, errOut)
		}
		if want := map[bool]int{true: 0, false: 5}[tc.dedup]; rep.Duplicates != want || len(rep.Operations) != 5 {
			t.Fatalf("dedup %v: %d duplicates of %d operations, want %d", tc.dedup, rep.Duplicates, len(rep.Operations), want)
		}
	}
}
