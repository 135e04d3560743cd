package main

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/apicheck"
)

func checkArgs(base string, extra ...string) []string {
	return append([]string{"check", base,
		"--path", "/charges",
		"--header", "Authorization: Bearer alice",
		"--other-header", "Authorization: Bearer bob",
		"--slow-path", "/charges?sleep=1200ms",
		"--fail-path", "/charges?fail=1",
		"--oracle", "count:/stats#/charges",
		"--retention", "24h",
		"--mismatch-query", "a=1", "--mismatch-path", "/charges/other", "--mismatch-method", "PATCH",
		"--rate", "200",
	}, extra...)
}

// TestCheckIdemProxy: the real idem proxy in front of a naive upstream
// passes every check.
func TestCheckIdemProxy(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(&apicheck.Naive{})
	defer up.Close()
	p := startProxy(t, "--upstream", up.URL, "--store", sqliteDSN(t), "--require-key")
	code, out, errOut := runCLI(t, checkArgs(p.url, "--require-key", "--strict", "--skip", "expiry")...)
	if code != 0 || strings.Contains(out, "FAIL") || strings.Contains(out, "WARN") || strings.Contains(out, "SKIP") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "20 checks: 20 pass, 0 warn, 0 fail, 0 skipped;") {
		t.Fatalf("no summary line:\n%s", out)
	}
}

// TestCheckStrict: --strict turns a WARN or SKIP into exit status 1; a
// SKIP names its flag.
func TestCheckStrict(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(&apicheck.Naive{})
	defer up.Close()
	p := startProxy(t, "--upstream", up.URL, "--store", "memory:")
	args := []string{"check", p.url, "--path", "/charges", "--header", "Authorization: Bearer alice",
		"--oracle", "count:/stats#/charges", "--retention", "24h", "--rate", "200", "--only", "replay-body,in-flight"}
	code, out, errOut := runCLI(t, args...)
	if code != 0 || !strings.Contains(out, "SKIP  in-flight") || !strings.Contains(out, "(enable with --slow-path)") {
		t.Fatalf("without --strict: exit %d\n%s\n%s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, append(args, "--strict")...)
	if code != 1 || !strings.Contains(errOut, "--strict: 1 of 2 checks did not pass (0 warn, 1 skipped)") {
		t.Fatalf("--strict: exit %d\n%s", code, errOut)
	}
	if code, _, errOut := runCLI(t, "check", p.url, "--only", "bogus"); code != 2 || !strings.Contains(errOut, "no such check") {
		t.Fatalf("--only bogus: exit %d %q", code, errOut)
	}
}

// TestCheckNaiveUpstream: the upstream alone is caught, exit status 1.
func TestCheckNaiveUpstream(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(&apicheck.Naive{})
	defer up.Close()
	report := filepath.Join(t.TempDir(), "check.html")
	code, out, errOut := runCLI(t, checkArgs(up.URL, "--json", "--report", report)...)
	if code != 1 || !strings.Contains(errOut, "checks failed") {
		t.Fatalf("exit %d, stderr:\n%s", code, errOut)
	}
	var rep apicheck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, out)
	}
	failed := map[string]bool{}
	for _, r := range rep.Results {
		failed[r.ID] = r.Status == apicheck.Fail
	}
	for _, id := range []string{"concurrency", "replay-effect", "mismatch-body", "in-flight"} {
		if !failed[id] {
			t.Errorf("%s did not fail", id)
		}
	}
	page, err := os.ReadFile(report)
	if err != nil || !strings.Contains(string(page), `data-id="concurrency" data-status="FAIL"`) {
		t.Fatalf("--report: %v", err)
	}
}

// TestCheckUsage: bad input is a usage error on one line, followed by the
// line pointing at --help.
func TestCheckUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"check"},
		{"check", "ftp://x"},
		{"check", "http://u:hunter2@h"},
		{"check", "http://h", "--header", "nocolon"},
		{"check", "http://h", "extra"},
	} {
		code, _, errOut := runCLI(t, args...)
		if code != 2 || strings.Contains(errOut, "hunter2") || !strings.HasSuffix(errOut, "\nRun 'idem check --help' for usage.\n") || strings.Count(strings.TrimSpace(errOut), "\n") > 1 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestCheckConfigFile: settings from a file, flags given as well win.
func TestCheckConfigFile(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(&apicheck.Naive{})
	defer up.Close()
	file := filepath.Join(t.TempDir(), "check.json")
	cfg := `{"url": "http://127.0.0.1:1", "path": "/nowhere", "headers": ["Authorization: Bearer alice"],
	         "oracle": "count:/stats#/charges", "max_requests": 60, "timeout": "5s"}`
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// The file's URL and path are wrong; the command line's win.
	code, out, errOut := runCLI(t, "check", up.URL, "--config", file, "--path", "/charges", "--json")
	if code != 1 {
		t.Fatalf("exit %d\n%s", code, errOut)
	}
	var rep apicheck.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Endpoint != "POST /charges" || rep.Oracle != "count endpoint GET /stats" || rep.Requests > 60 {
		t.Fatalf("merged settings: %+v", rep)
	}
	if code, _, errOut := runCLI(t, "check", "--config", filepath.Join(t.TempDir(), "missing.json")); code != 2 || !strings.Contains(errOut, "--config") {
		t.Fatalf("missing file: exit %d, %q", code, errOut)
	}
	if err := os.WriteFile(file, []byte(`{"url":"http://h","bogus":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "check", "--config", file); code != 2 || !strings.Contains(errOut, "bogus") {
		t.Fatalf("unknown field: exit %d, %q", code, errOut)
	}
}
