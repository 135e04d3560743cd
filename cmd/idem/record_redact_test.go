package main

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/idemkit/idem/cmd/idem/internal/apicheck"
)

// recordOne sends one keyed POST through a recorder writing to file and
// returns the records of the file.
func recordOne(t *testing.T, file string, rawKeys bool, target, key string) []apicheck.Record {
	t.Helper()
	o := proxyOptions{methods: []string{"POST"}, scopeHeaders: []string{"Authorization"}, recordRawKeys: rawKeys}
	rc, err := newRecorder(file, 1<<20, 1, o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rc.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	})))
	defer srv.Close()
	r, _ := http.NewRequest("POST", srv.URL+target, strings.NewReader(`{"amount":5}`))
	r.Header.Set("Idempotency-Key", `"`+key+`"`)
	r.Header.Set("Authorization", "Bearer very-secret-caller")
	resp, err := oneShot.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := rc.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := apicheck.ReadRecords(file, bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// A recording holds no query-string secret and no raw key (unless asked),
// keeps the path as sent, and is readable by its owner only, even when
// the file existed with a wider mode.
func TestRecorderRedactsQueryKeyPathMode(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "rec.ndjson")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(file, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	const target = "/a%2Fb%3Fx=1?access_token=SEKRET1&amount=5&X-Amz-Signature=SEKRET2&apiKey=SEKRET3&client_secret=SEKRET4&password=SEKRET5&sig=SEKRET6&note=hello"
	recs := recordOne(t, file, false, target, "raw-customer-key-123")
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("the recording's mode is %v, want 0600", st.Mode().Perm())
	}
	b, _ := os.ReadFile(file)
	for _, secret := range []string{"SEKRET", "very-secret-caller", "raw-customer-key-123"} {
		if bytes.Contains(b, []byte(secret)) {
			t.Errorf("the recording holds %q:\n%s", secret, b)
		}
	}
	rec := recs[0]
	if rec.Path != "/a%2Fb%3Fx=1" {
		t.Errorf("recorded path %q, want the path as sent, /a%%2Fb%%3Fx=1", rec.Path)
	}
	if !strings.Contains(rec.Query, "amount=5") || !strings.Contains(rec.Query, "note=hello") || !strings.Contains(rec.Query, "access_token=%7B%7Bquery-access_token-1%7D%7D") {
		t.Errorf("recorded query %q: want the plain parameters kept and the secrets as placeholders", rec.Query)
	}
	if !strings.HasPrefix(rec.Key, "h-") {
		t.Errorf("recorded key %q, want its keyed digest h-…", rec.Key)
	}

	// --record-raw-keys: the key as sent.
	raw := filepath.Join(t.TempDir(), "raw.ndjson")
	if recs := recordOne(t, raw, true, "/p", "raw-customer-key-123"); recs[0].Key != "raw-customer-key-123" {
		t.Errorf("--record-raw-keys recorded %q", recs[0].Key)
	}
}

func TestSecretParam(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"access_token", "token", "key", "api_key", "apiKey", "APIKEY", "secret", "client_secret", "password", "X-Amz-Signature", "signature", "sig", "auth", "session_id", "jwt", "refreshToken"} {
		if !secretParam(n) {
			t.Errorf("%q is not taken for a secret", n)
		}
	}
	for _, n := range []string{"amount", "currency", "page", "limit", "note", "q", "id"} {
		if secretParam(n) {
			t.Errorf("%q is taken for a secret", n)
		}
	}
}

// Replay sends the path as recorded (escaped) and the query's placeholders
// mapped by --credentials; and the report escapes control characters that
// a recording holds.
func TestReplayRawPathQueryAndControlCharacters(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	n := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		seen = append(seen, r.URL.EscapedPath()+"?"+r.URL.RawQuery)
		id := n
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"x%d"}`, id) // every request a new effect: duplicates are reported
	}))
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "r.ndjson")
	rec := `{"t":"2026-01-01T00:00:00Z","method":"POST","path":"/a%2Fb%3Fx=1","query":"access_token=%7B%7Bquery-access_token-1%7D%7D&n=1","key":"k\u009b31m\u202e","scope":"s\u001b[2J\u001b]0;pwned\u0007","body":"{}","status":201}` + "\n"
	if err := os.WriteFile(file, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "replay", file, "--target", srv.URL, "--same-keys"); code != 2 || !strings.Contains(errOut, "{{query-access_token-1}}") {
		t.Fatalf("a query placeholder without credentials: exit %d %q", code, errOut)
	}
	creds := filepath.Join(dir, "c.json")
	os.WriteFile(creds, []byte(`{"{{query-access_token-1}}":"staging tok&en"}`), 0o600)
	code, out, errOut := runCLI(t, "replay", file, "--target", srv.URL, "--credentials", creds, "--copies", "2", "--oracle", "id:/id")
	if code != 1 {
		t.Fatalf("exit %d, want 1 (duplicates)\n%q\n%q", code, out, errOut)
	}
	mu.Lock()
	for _, s := range seen {
		if s != "/a%2Fb%3Fx=1?access_token=staging+tok%26en&n=1" {
			t.Errorf("the target saw %q", s)
		}
	}
	mu.Unlock()
	for _, c := range out + errOut {
		if c < 0x20 && c != '\n' && c != '\t' || c >= 0x7f && c < 0xa0 || c == 0x202e {
			t.Fatalf("the report wrote control character %#x:\n%q", c, out)
		}
	}
	if !strings.Contains(out, `key k\u009b31m\u202e (caller`) || !strings.Contains(out, `(caller s\x1b[2J\x1b]0;pwned\x07)`) {
		t.Errorf("the key and the caller are not shown escaped:\n%s", out)
	}
}

// A recording too large for --max-requests is refused from a count that
// keeps no record in memory: the refusal allocates a small part of what
// reading the records (and building records × copies jobs) took.
// Not parallel: it measures the process's allocations.
func TestReplayRefusesBeforeReading(t *testing.T) {
	file := filepath.Join(t.TempDir(), "big.ndjson")
	var b bytes.Buffer
	body := strings.Repeat("x", 1000)
	const records = 5000
	for i := range records {
		fmt.Fprintf(&b, `{"t":"2026-01-01T00:00:00Z","method":"POST","path":"/charges","key":"k%d","scope":"s","body":%q,"status":201}`+"\n", i, body)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	size := uint64(b.Len())
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	code, _, errOut := runCLI(t, "replay", file, "--target", "http://127.0.0.1:1", "--copies", "100", "--max-requests", "1000")
	runtime.ReadMemStats(&after)
	if code != 2 || !strings.Contains(errOut, "needs 500000 requests (5000 records × 100 copies)") {
		t.Fatalf("exit %d %q", code, errOut)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > size/2 {
		t.Errorf("refusing a %d-byte recording allocated %d bytes: it was read into memory", size, alloc)
	}
}
