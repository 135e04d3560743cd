package main

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// TestE2EMemoryBudget holds the worst request loads at once against a real
// proxy with its default --memory-budget (256 MiB) and --json-fingerprint:
// 100 gzip bombs (10 KiB each, decoding to 10 MiB − 1), 50 connections that
// send 10 MiB − 1 of a 10 MiB body and hold the last byte back, and 8 wide
// 10 MiB − 1 JSON bodies ([0,0,…]). The process's peak RSS (VmHWM) stays
// under the budget plus a fixed overhead; requests that found the budget
// full got 503 memory-budget with Retry-After, and nothing ran for them.
func TestE2EMemoryBudget(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	ran := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		mu.Lock()
		ran[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	p := startProxy(t, "--upstream", up.URL, "--store", "memory:", "--json-fingerprint")
	addr := strings.TrimPrefix(p.url, "http://")

	const body = 10<<20 - 1
	var bomb bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&bomb, gzip.BestCompression)
	zw.Write(make([]byte, body))
	zw.Close()
	wide := bytes.Repeat([]byte("0,"), body/2)
	wide[0], wide[len(wide)-1] = '[', ']'

	var statusMu sync.Mutex
	statuses := map[string]map[int]int{}
	count := func(load string, a answer) {
		statusMu.Lock()
		defer statusMu.Unlock()
		if statuses[load] == nil {
			statuses[load] = map[int]int{}
		}
		code := a.status
		if a.err != nil {
			code = -1
		}
		statuses[load][code]++
		if a.status == 503 && (!strings.Contains(a.body, "memory-budget") || a.header.Get("Retry-After") == "") {
			t.Errorf("%s: 503 without memory-budget and Retry-After: %+v", load, a)
		}
	}

	// The slow connections go first and hold their bytes until the end.
	const slow = 50
	release := make(chan struct{})
	var slowWG, holding sync.WaitGroup
	holding.Add(slow)
	for i := range slow {
		slowWG.Go(func() {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Error(err)
				holding.Done()
				return
			}
			defer c.Close()
			fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer test-caller\r\nIdempotency-Key: slow-%d\r\nContent-Length: %d\r\n\r\n", i, body+1)
			_, err = c.Write(make([]byte, body))
			holding.Done()
			if err != nil {
				return // refused early: the proxy answered and closed
			}
			<-release
			c.Write([]byte{0})
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				count("slow", answer{err: err})
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			count("slow", answer{status: resp.StatusCode, body: string(b), header: resp.Header})
		})
	}
	holding.Wait()

	var wg sync.WaitGroup
	for i := range 100 {
		wg.Go(func() {
			count("gzip", send(context.Background(), p.url, "bomb-"+strconv.Itoa(i), bomb.String(), "Content-Encoding", "gzip"))
		})
	}
	for i := range 8 {
		wg.Go(func() {
			count("json", send(context.Background(), p.url, "wide-"+strconv.Itoa(i), string(wide), "Content-Type", "application/json"))
		})
	}
	wg.Wait()
	close(release)
	slowWG.Wait()

	hwm := vmHWM(t, p.cmd.Process.Pid)
	const budget, overhead = 256 << 20, 128 << 20
	t.Logf("peak RSS %d MiB (budget %d MiB + overhead %d MiB); answers %v", hwm>>20, budget>>20, overhead>>20, statuses)
	if hwm > budget+overhead {
		t.Errorf("peak RSS %d MiB is over the budget plus the fixed overhead (%d MiB)", hwm>>20, (budget+overhead)>>20)
	}
	mu.Lock()
	defer mu.Unlock()
	statusMu.Lock()
	defer statusMu.Unlock()
	for load, byStatus := range statuses {
		if byStatus[201]+byStatus[503] == 0 {
			t.Errorf("%s: no request was answered 201 or 503: %v", load, byStatus)
		}
	}
	if len(ran) != statuses["gzip"][201]+statuses["json"][201]+statuses["slow"][201] {
		t.Errorf("the service ran %d keys, %d requests were answered 201: a refused request ran", len(ran), statuses["gzip"][201]+statuses["json"][201]+statuses["slow"][201])
	}
}

// vmHWM is the peak resident set size of process pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/PID/status")
	return 0
}
