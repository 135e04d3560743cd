package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/httpidem"
)

func TestParseSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{
		"1024": 1024, "10MiB": 10 << 20, "10mib": 10 << 20, "512KB": 512000, "1 GiB": 1 << 30, "7B": 7, "2GB": 2e9, "1KiB": 1024,
	} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "MiB", "-1", "0", "10XB", "1.5MiB", "99999999999999999999", "9999999999GiB"} {
		if got, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) = %d, want an error", in, got)
		}
	}
}

func TestParseProxyFlags(t *testing.T) {
	t.Parallel()
	o, err := parseProxyFlags([]string{"--upstream", "http://127.0.0.1:9000"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.listen != "127.0.0.1:8080" || o.store != "sqlite:idem.db" || o.cache != "" || strings.Join(o.methods, ",") != "POST,PATCH" ||
		o.requireKey || o.retention != 24*time.Hour || o.lease != 30*time.Second || o.maxBody != 10<<20 ||
		strings.Join(o.scopeHeaders, ",") != "Authorization" || o.admin != "" {
		t.Fatalf("defaults: %+v", o)
	}
	o, err = parseProxyFlags([]string{"--upstream", "https://svc:8443/base", "--methods", "post, put", "--require-key",
		"--scope-header", "X-Tenant", "--scope-header", "Authorization", "--max-body", "1KiB", "--lease", "5s", "--retention", "1h"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.methods, ",") != "POST,PUT" || !o.requireKey || strings.Join(o.scopeHeaders, ",") != "X-Tenant,Authorization" ||
		o.maxBody != 1024 || o.lease != 5*time.Second || o.retention != time.Hour {
		t.Fatalf("flags: %+v", o)
	}
}

func TestProxyUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"proxy"}, "--upstream is required"},
		{[]string{"proxy", "--upstream", "ftp://x"}, "http:// or https://"},
		{[]string{"proxy", "--upstream", "http://u:hunter2@x:1", "extra"}, "unexpected argument"},
		{[]string{"proxy", "--upstream", "http://x:1", "--max-body", "lots"}, "--max-body"},
		{[]string{"proxy", "--upstream", "http://x:1", "--methods", ","}, "--methods"},
		{[]string{"proxy", "--upstream", "http://x:1", "--lease", "1h", "--retention", "1m"}, "--retention"},
		{[]string{"proxy", "--upstream", "http://x:1", "--scope-header", " "}, "empty header name"},
		{[]string{"proxy", "--upstream", "http://x:1", "--anonymous-scope", "open"}, "--anonymous-scope"},
		{[]string{"proxy", "--upstream", "http://x:1", "--store", "nosuch://x"}, "unknown scheme"},
	} {
		code, _, errs := runCLI(t, tc.args...)
		if code == 0 || !strings.Contains(errs, tc.want) || strings.Contains(errs, "hunter2") {
			t.Errorf("%v: code %d, stderr %q; want %q", tc.args, code, errs, tc.want)
		}
	}
	if code, out, errs := runCLI(t, "proxy", "-h"); code != 0 || !strings.Contains(out+errs, "unique constraint") {
		t.Errorf("help: %d %q", code, out+errs)
	}
}

func TestProxyScopeFunc(t *testing.T) {
	t.Parallel()
	r := func(kv ...string) *http.Request {
		req := httptest.NewRequest("POST", "/", nil)
		for i := 0; i+1 < len(kv); i += 2 {
			req.Header.Add(kv[i], kv[i+1])
		}
		return req
	}
	def := proxyScopeFunc(nil, false)
	a, err := def(r("Authorization", "Bearer t"))
	b, _ := def(r("Authorization", "bearer   t"))
	if err != nil || a == "" || a != b {
		t.Fatalf("default scope: %q %q %v", a, b, err)
	}
	if s, err := def(r("X-Tenant", "acme")); !errors.Is(err, httpidem.ErrScopeRequired) || s != "" {
		t.Fatalf("anonymous, not shared: %q %v", s, err)
	}
	if s, err := proxyScopeFunc(nil, true)(r()); err != nil || s != "" {
		t.Fatalf("anonymous, shared: %q %v", s, err)
	}
	gw := proxyScopeFunc([]string{"X-Tenant", "X-User"}, false)
	t1, _ := gw(r("X-Tenant", "acme", "X-User", "7"))
	t2, _ := gw(r("X-Tenant", "acme", "X-User", "8"))
	t3, _ := gw(r("X-Tenant", "acme"))
	if t1 == "" || t1 == t2 || t1 == t3 || t3 == "" {
		t.Fatalf("gateway headers: %q %q %q", t1, t2, t3)
	}
	if _, err := gw(r("Authorization", "Bearer t")); !errors.Is(err, httpidem.ErrScopeRequired) {
		t.Fatalf("Authorization counted although --scope-header names others: %v", err)
	}
}

func TestProxyFlagsFromEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"IDEM_UPSTREAM":         "http://svc:9000",
		"IDEM_STORE":            "memory:",
		"IDEM_SCOPE_HEADER":     "X-Tenant, X-User",
		"IDEM_UNKNOWN_OUTCOME":  "release",
		"IDEM_UPSTREAM_TIMEOUT": "5s",
		"IDEM_STORE_5XX":        "true",
		"IDEM_LEASE":            "7s",
		"IDEM_LOG_FORMAT":       "json",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	o, err := parseProxyFlagsEnv([]string{"--lease", "9s"}, lookup, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.upstream.String() != "http://svc:9000" || o.store != "memory:" || strings.Join(o.scopeHeaders, ",") != "X-Tenant,X-User" ||
		o.unknownOutcome != httpidem.ReleaseUnknown || o.upstreamTimeout != 5*time.Second || !o.store5xx || !o.logJSON {
		t.Fatalf("from the environment: %+v", o)
	}
	if o.lease != 9*time.Second {
		t.Fatalf("--lease on the command line must win over IDEM_LEASE: %v", o.lease)
	}
	env["IDEM_WAIT"] = "soon"
	if _, err := parseProxyFlagsEnv(nil, lookup, io.Discard); err == nil || !strings.Contains(err.Error(), "IDEM_WAIT") {
		t.Fatalf("a bad environment value: %v", err)
	}
	delete(env, "IDEM_WAIT")
	// A bad value says what was given and what is expected.
	for k, tc := range map[string]struct{ value, want string }{
		"IDEM_LEASE":     {"30", `IDEM_LEASE="30": want a duration such as "30s"`},
		"IDEM_STORE_5XX": {"yes", `IDEM_STORE_5XX="yes": want true or false (also accepted: 1, 0`},
	} {
		old := env[k]
		env[k] = tc.value
		if _, err := parseProxyFlagsEnv(nil, lookup, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%s: %v, want %q", k, tc.value, err, tc.want)
		}
		env[k] = old
	}
	for _, v := range []string{"1", "t", "TRUE", "True"} { // strconv.ParseBool's forms
		env["IDEM_STORE_5XX"] = v
		if o, err := parseProxyFlagsEnv(nil, lookup, io.Discard); err != nil || !o.store5xx {
			t.Errorf("IDEM_STORE_5XX=%s: %v, %v", v, o.store5xx, err)
		}
	}
}

func TestProxyFlagDefaultsAndChecks(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	o, err := parseProxyFlagsEnv([]string{"--upstream", "http://127.0.0.1:9000"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.unknownOutcome != httpidem.HoldUnknown || o.upstreamTimeout != time.Minute || o.anonymousShared || o.store5xx ||
		o.maxResponse != 8<<20 || o.writeTimeout != o.readTimeout+o.upstreamTimeout+3*o.storeTimeout+10*time.Second || o.maxHeaderBytes != 64<<10 ||
		o.storeTimeout != idem.DefaultStoreTimeout || o.memoryBudget != httpidem.DefaultMemoryBudget {
		t.Fatalf("defaults: %+v", o)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--upstream", "127.0.0.1:9000"}, `"127.0.0.1:9000": want an http:// or https:// URL with a host; did you mean "http://127.0.0.1:9000"?`},
		{[]string{"--upstream", "localhost:9000"}, `did you mean "http://localhost:9000"?`},
		{[]string{"--upstream", "http://x:1", "--unknown-outcome", "retry"}, "--unknown-outcome"},
		{[]string{"--upstream", "http://x:1", "--upstream-timeout", "2m", "--write-timeout", "1m"}, "--write-timeout"},
		{[]string{"--upstream", "http://x:1", "--log-level", "loud"}, "--log-level"},
		{[]string{"--upstream", "http://x:1", "--max-response", "3GiB"}, "--max-response"},
		{[]string{"--upstream", "http://x:1", "--store-timeout", "0s"}, "--store-timeout must be positive"},
		{[]string{"--upstream", "http://x:1", "--memory-budget", "0"}, "--memory-budget"},
		{[]string{"--upstream", "http://x:1", "--cache", "postgres://db/x"}, "--cache postgres://db/x: the cache must be a Redis DSN"},
		{[]string{"--upstream", "http://x:1", "--cache", "memory:"}, "the cache must be a Redis DSN"},
	} {
		if _, err := parseProxyFlagsEnv(tc.args, none, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want %q", tc.args, err, tc.want)
		}
	}
}
