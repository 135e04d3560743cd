package main

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// --allow-async-replication and --synchronous-commit, from flags and from
// their environment variables; weak levels and non-PostgreSQL stores are
// refused.
func TestProxyReplicationFlags(t *testing.T) {
	t.Parallel()
	up := []string{"--upstream", "http://127.0.0.1:9000"}
	none := func(string) (string, bool) { return "", false }
	o, err := parseProxyFlagsEnv(append(up, "--store", "postgres://u@db/x", "--allow-async-replication", "--synchronous-commit", "remote_apply"), none, io.Discard)
	if err != nil || !o.allowAsyncReplication || o.synchronousCommit != "remote_apply" {
		t.Fatalf("flags: %+v, %v", o, err)
	}
	env := map[string]string{"IDEM_STORE": "postgres://u@db/x", "IDEM_ALLOW_ASYNC_REPLICATION": "true", "IDEM_SYNCHRONOUS_COMMIT": "on"}
	o, err = parseProxyFlagsEnv(up, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, io.Discard)
	if err != nil || !o.allowAsyncReplication || o.synchronousCommit != "on" {
		t.Fatalf("environment: %+v, %v", o, err)
	}
	o, err = parseProxyFlagsEnv(up, none, io.Discard)
	if err != nil || o.allowAsyncReplication || o.synchronousCommit != "" {
		t.Fatalf("defaults: %+v, %v", o, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--store", "postgres://u@db/x", "--synchronous-commit", "off"}, "want on or remote_apply"},
		{[]string{"--store", "postgres://u@db/x", "--synchronous-commit", "remote_write"}, "want on or remote_apply"},
		{[]string{"--store", "sqlite:x.db", "--synchronous-commit", "on"}, "PostgreSQL --store only"},
		{[]string{"--store", "sqlite:x.db", "--wait-replicas", "1"}, "Redis --store only"},
		{[]string{"--store", "redis://127.0.0.1:6379/0", "--wait-replicas", "-1"}, "want 0 to 64"},
		{[]string{"--store", "redis://127.0.0.1:6379/0", "--wait-timeout", "1s"}, "positive --wait-replicas"},
	} {
		if _, err := parseProxyFlagsEnv(append(up, tc.args...), none, io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// A single server: the proxy logs it at start, /readyz and the ops API
// show it, 'idem keys list' prints it first.
func TestProxyReplicationSingle(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	dsn := sqliteDSN(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", dsn, "--admin", "127.0.0.1:0")
	poll(t, "the start log's replication line", func() bool {
		return strings.Contains(p.stderr.String(), `msg="store replication"`) && strings.Contains(p.stderr.String(), `mode="single server"`)
	})
	if code, body := get(t, p.admin+"/readyz"); code != 200 || body != "ready\nreplication: single server (SQLite: one file, no replicas)\n" {
		t.Errorf("readyz: %d %q", code, body)
	}
	code, body := get(t, p.admin+"/ops/api/replication")
	var v replicationView
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil || v.Mode != "single server" || v.RefusesClaims {
		t.Errorf("ops API: %d %s", code, body)
	}
	if code, out, errs := runCLI(t, "keys", "list", "--store", dsn); code != 0 || !strings.HasPrefix(out, "replication: single server (SQLite: one file, no replicas)\n") {
		t.Errorf("keys list: %d %q %q", code, out, errs)
	}
	if code, out, errs := runCLI(t, "keys", "list", "--store", dsn, "--json"); code != 0 || !strings.HasPrefix(out, "[") || !strings.Contains(errs, "replication: single server") {
		t.Errorf("keys list --json: %d %q %q", code, out, errs)
	}
}

// A PostgreSQL primary with an asynchronous standby: the proxy starts, warns
// that the store refuses claims, answers 503 to keyed requests, /readyz is
// not ready and says why, the ops API says it refuses; with
// --allow-async-replication it serves, warns, and is ready.
func TestProxyReplicationAsyncPostgres(t *testing.T) {
	t.Parallel()
	pair := testenv.StartPGPair(t, testenv.PGPairOptions{Async: true})
	up := newUpstream(t)
	dsn := pair.PrimaryDSN()

	p := startProxy(t, "--upstream", up.srv.URL, "--store", dsn, "--admin", "127.0.0.1:0")
	poll(t, "the start log's warning", func() bool {
		return strings.Contains(p.stderr.String(), "the store refuses to grant claims")
	})
	if a := post(t, p.url, "k-async", "x"); a.status != 503 || up.count("k-async") != 0 {
		t.Errorf("a keyed request while the store refuses: %+v, %d executions", a, up.count("k-async"))
	}
	if code, body := get(t, p.admin+"/readyz"); code != 503 || !strings.Contains(body, "asynchronous replicas") || !strings.Contains(body, "--allow-async-replication") {
		t.Errorf("readyz: %d %q", code, body)
	}
	code, body := get(t, p.admin+"/ops/api/replication")
	var v replicationView
	if err := json.Unmarshal([]byte(body), &v); code != 200 || err != nil || v.Mode != "asynchronous replicas" || v.Replicas != 1 || !v.RefusesClaims {
		t.Errorf("ops API: %d %s", code, body)
	}
	if code, out, errs := runCLI(t, "keys", "list", "--store", dsn); code != 0 || !strings.HasPrefix(out, "replication: asynchronous replicas (") {
		t.Errorf("keys list: %d %q %q", code, out, errs)
	}

	allowed := startProxy(t, "--upstream", up.srv.URL, "--store", dsn, "--admin", "127.0.0.1:0", "--allow-async-replication")
	poll(t, "the start log's warning", func() bool {
		return strings.Contains(allowed.stderr.String(), "allowed by --allow-async-replication")
	})
	if a := post(t, allowed.url, "k-allowed", "x"); a.status != 201 {
		t.Errorf("a keyed request with --allow-async-replication: %+v", a)
	}
	if code, body := get(t, allowed.admin+"/readyz"); code != 200 || !strings.Contains(body, "replication: asynchronous replicas") {
		t.Errorf("readyz with --allow-async-replication: %d %q", code, body)
	}
}

// A Redis master with a replica: without --wait-replicas the proxy refuses
// claims (503, /readyz not ready) unless --allow-async-replication; with
// --wait-replicas 1 it serves, and a replica that stops answering turns
// keyed requests into 503s, never into an unreplicated 201.
func TestProxyReplicationRedis(t *testing.T) {
	t.Parallel()
	pair := testenv.StartRedisPair(t)
	up := newUpstream(t)
	dsn := pair.Master.URL()

	refused := startProxy(t, "--upstream", up.srv.URL, "--store", dsn, "--admin", "127.0.0.1:0")
	if a := post(t, refused.url, "k-redis-async", "x"); a.status != 503 || up.count("k-redis-async") != 0 {
		t.Errorf("a keyed request to a master with an unwaited replica: %+v, %d executions", a, up.count("k-redis-async"))
	}
	if code, body := get(t, refused.admin+"/readyz"); code != 503 || !strings.Contains(body, "asynchronous replicas") {
		t.Errorf("readyz without --wait-replicas: %d %q", code, body)
	}

	allowed := startProxy(t, "--upstream", up.srv.URL, "--store", dsn, "--allow-async-replication")
	if a := post(t, allowed.url, "k-redis-allowed", "x"); a.status != 201 {
		t.Errorf("with --allow-async-replication: %+v", a)
	}

	waiting := startProxy(t, "--upstream", up.srv.URL, "--store", dsn, "--admin", "127.0.0.1:0", "--wait-replicas", "1", "--wait-timeout", "2s")
	if a := post(t, waiting.url, "k-redis-wait", "x"); a.status != 201 || up.count("k-redis-wait") != 1 {
		t.Errorf("with --wait-replicas 1: %+v, %d executions", a, up.count("k-redis-wait"))
	}
	if code, body := get(t, waiting.admin+"/readyz"); code != 200 || !strings.Contains(body, "replication: synchronous") {
		t.Errorf("readyz with --wait-replicas 1: %d %q", code, body)
	}
	pair.Link.Set(testenv.BlackHole)
	if a := post(t, waiting.url, "k-redis-cut", "x"); a.status != 503 {
		t.Errorf("with the replica cut off: %+v, want 503 (the claim was not replicated)", a)
	}
	if n := up.count("k-redis-cut"); n != 0 {
		t.Errorf("with the replica cut off the request ran %d times, want 0", n)
	}
	pair.Link.Set(testenv.Pass)
}
