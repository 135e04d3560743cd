package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// runRecordingUpstream runs bench/http/upstream on addr with its records
// in file, until it exits (it dies on ?die=…) or the test ends.
func runRecordingUpstream(t *testing.T, addr, file string) <-chan struct{} {
	t.Helper()
	cmd := exec.Command(demoUpstreamBin, "-listen", addr, "-records", file)
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan struct{})
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			if regexp.MustCompile(`listening on`).MatchString(sc.Text()) {
				close(up)
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGKILL); <-done })
	select {
	case <-up:
	case <-time.After(60 * time.Second):
		t.Fatal("the upstream did not start")
	}
	return done
}

// The resolver against a real service process that dies in the middle of
// requests: one after it charged (its answer is lost), one before. Both
// keys are held while the service is down; once it is back, the proxy's
// resolver learns from the service's own records that the first charge
// happened (its answer becomes the key's result) and that the second
// never did (the key is released and its retry runs once). Nothing is
// forwarded twice.
func TestE2EResolveURL(t *testing.T) {
	t.Parallel()
	startDemoUpstream(t) // builds the binary
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	records := filepath.Join(t.TempDir(), "charges.jsonl")
	p := startProxy(t, "--upstream", "http://"+addr, "--store", sqliteDSN(t), "--resolve-url", "http://"+addr+"/idempotency", "--admin", "127.0.0.1:0")

	charge := func(key, die string) answer {
		t.Helper()
		return postPath(t, p.url+"/charges", key, "x", die)
	}
	died := runRecordingUpstream(t, addr, records)
	if a := charge("paid", "after"); a.status != 502 || !strings.Contains(a.body, "outcome-unknown") {
		t.Fatalf("answer lost after the charge: %+v", a)
	}
	<-died
	died = runRecordingUpstream(t, addr, records)
	if a := charge("unpaid", "before"); a.status != 502 || !strings.Contains(a.body, "outcome-unknown") {
		t.Fatalf("service died before the charge: %+v", a)
	}
	<-died
	// Down: both keys are held, retries replay the outcome-unknown answer.
	for _, k := range []string{"paid", "unpaid"} {
		if a := charge(k, ""); a.status != 502 || !a.replayed {
			t.Fatalf("%s while the service is down: %+v", k, a)
		}
	}
	runRecordingUpstream(t, addr, records)
	var paid answer
	poll(t, "the paid key to be resolved with the service's answer", func() bool {
		paid = charge("paid", "")
		return paid.status == 201
	})
	if !paid.replayed || !strings.Contains(paid.body, `"charge":"ch_1"`) {
		t.Fatalf("resolved answer %+v", paid)
	}
	var unpaid answer
	poll(t, "the unpaid key to be released and run", func() bool {
		unpaid = charge("unpaid", "")
		return unpaid.status == 201
	})
	if unpaid.replayed || !strings.Contains(unpaid.body, `"charge":"ch_2"`) {
		t.Fatalf("the released key's retry: %+v", unpaid)
	}
	if a := charge("unpaid", ""); a.status != 201 || !a.replayed || a.body != unpaid.body {
		t.Fatalf("replay after the run: %+v", a)
	}
	if _, stats := get(t, "http://"+addr+"/stats"); !strings.Contains(stats, `"charges":2`) {
		t.Fatalf("service stats %s: want 2 charges, one per key", stats)
	}
	_, metrics := get(t, p.admin+"/metrics")
	for _, want := range []string{`idem_resolutions_total{by="service",how="release"} 1`, `idem_resolutions_total{by="service",how="result"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// postPath is post to a whole URL.
func postPath(t *testing.T, url, key, body, die string) answer {
	t.Helper()
	r, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Idempotency-Key", key)
	r.Header.Set("Authorization", "Bearer test-caller")
	if die != "" {
		r.Header.Set("X-Upstream-Die", die)
	}
	resp, err := client.Do(r)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get("Idempotent-Replayed") == "true", header: resp.Header, err: err}
}
