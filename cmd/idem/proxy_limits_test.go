package main

import (
	"fmt"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// metric reads one unlabelled gauge from the proxy's /metrics.
func metric(t *testing.T, p *proxy, name string) float64 {
	t.Helper()
	_, body := get(t, p.admin+"/metrics")
	m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestE2ESlowClientsBounded: 200 connections that announce a 10 MiB body
// and send one byte, and 100 that never finish their headers. The proxy's
// memory stays bounded (the body buffer grows with the bytes that arrive,
// never with the declared length), its goroutines stay within a few per
// connection, and once --read-timeout and --read-header-timeout pass it has
// dropped them all.
func TestE2ESlowClientsBounded(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:", "--admin", "127.0.0.1:0",
		"--read-timeout", "3s", "--read-header-timeout", "3s")
	baseG := metric(t, p, "go_goroutines")
	baseRSS := metric(t, p, "process_resident_memory_bytes")
	baseHeap := metric(t, p, "go_memstats_heap_alloc_bytes")
	addr := strings.TrimPrefix(p.url, "http://")
	const bodies, heads = 200, 100
	conns := make([]net.Conn, 0, bodies+heads)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range bodies + heads {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i < bodies {
			fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer slow\r\nIdempotency-Key: slow-%d\r\nContent-Length: %d\r\n\r\nx", i, 10<<20)
		} else {
			fmt.Fprintf(c, "POST /charges HTTP/1.1\r\nHost: x\r\nX-Slow: ")
		}
	}
	// Every body connection is being read (its claim is not taken yet: the
	// body comes first) once the goroutines are there.
	poll(t, "the proxy to hold every connection", func() bool { return metric(t, p, "go_goroutines") >= baseG+bodies+heads })
	g := metric(t, p, "go_goroutines")
	rss := metric(t, p, "process_resident_memory_bytes")
	heap := metric(t, p, "go_memstats_heap_alloc_bytes")
	if g > baseG+3*(bodies+heads)+50 {
		t.Errorf("%v goroutines for %d connections (baseline %v)", g, bodies+heads, baseG)
	}
	// 200 × 10 MiB declared: preallocating would cost 2 GiB. What they
	// sent costs a few KiB each.
	if grown := heap - baseHeap; grown > 64<<20 {
		t.Errorf("the heap grew by %.0f MiB for %d slow connections", grown/(1<<20), bodies+heads)
	}
	if grown := rss - baseRSS; grown > 64<<20 {
		t.Errorf("RSS grew by %.0f MiB for %d slow connections (from %.0f MiB)", grown/(1<<20), bodies+heads, baseRSS/(1<<20))
	}
	t.Logf("goroutines %v → %v, RSS %.0f → %.0f MiB, heap %.0f → %.0f MiB", baseG, g, baseRSS/(1<<20), rss/(1<<20), baseHeap/(1<<20), heap/(1<<20))
	// The timeouts end them: the proxy closes every connection.
	poll(t, "the read timeouts to drop the slow connections", func() bool { return metric(t, p, "go_goroutines") <= baseG+10 })
	if up.count("slow-0") != 0 {
		t.Fatal("a request whose body never arrived reached the service")
	}
}
