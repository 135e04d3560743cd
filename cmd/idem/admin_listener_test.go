package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/memstore"
)

// countingStore counts the records and digests a store hands to the
// operations API, the work one request makes the store do.
type countingStore struct {
	*memstore.Store
	rows atomic.Int64
}

func (s *countingStore) List(ctx context.Context, st idem.State, started bool, limit int) ([]idem.Record, error) {
	recs, err := s.Store.List(ctx, st, started, limit)
	s.rows.Add(int64(len(recs)))
	return recs, err
}

func (s *countingStore) DigestsWithPrefix(ctx context.Context, prefix string, limit int) ([]idem.Digest, error) {
	ds, err := s.Store.DigestsWithPrefix(ctx, prefix, limit)
	s.rows.Add(int64(len(ds)))
	return ds, err
}

func (s *countingStore) Get(ctx context.Context, k idem.Key) (idem.Record, error) {
	s.rows.Add(1)
	return s.Store.Get(ctx, k)
}

func (s *countingStore) Lookup(ctx context.Context, d idem.Digest) (idem.Record, error) {
	s.rows.Add(1)
	return idem.Lookup(ctx, s.Store, d)
}

// GET /ops/api/keys/<16 hex digits>, the prefix log lines carry, with
// 20,000 records in the store: the store hands over at most three records
// (two digests to tell one from ambiguous, then the record), however many
// it holds. It used to list the whole store for every such request.
func TestAdminPrefixLookupIsBounded(t *testing.T) {
	t.Parallel()
	s := &countingStore{Store: memstore.New(&memstore.Config{SweepInterval: -1})}
	t.Cleanup(func() { s.Close() })
	ctx := context.Background()
	const n = 20000
	var last idem.Key
	for i := range n {
		last = idem.MustKey("t", fmt.Sprintf("order-%d", i))
		c, err := s.Begin(ctx, idem.BeginRequest{Key: last})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, c.Owner, []byte("ok")); err != nil {
			t.Fatal(err)
		}
	}
	mux := http.NewServeMux()
	(&opsHandler{store: s, log: slog.New(slog.DiscardHandler)}).register(mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	d := last.Digest().String()
	for _, p := range []string{d[:16], d} {
		s.rows.Store(0)
		resp, err := oneShot.Get(srv.URL + "/ops/api/keys/" + p)
		if err != nil {
			t.Fatal(err)
		}
		var v recordView
		err = json.NewDecoder(resp.Body).Decode(&v)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || err != nil || v.Digest != d {
			t.Fatalf("GET %s: %d %+v %v", p, resp.StatusCode, v, err)
		}
		if got := s.rows.Load(); got > 3 {
			t.Errorf("GET /ops/api/keys/%s made the store hand over %d records of %d; want at most 3", p, got, n)
		}
	}
	// A prefix no record has: not found, without a scan of the records.
	s.rows.Store(0)
	resp, err := oneShot.Get(srv.URL + "/ops/api/keys/0000000000000000")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown prefix: %d, want 404", resp.StatusCode)
	}
	if got := s.rows.Load(); got > 3 {
		t.Errorf("a lookup by an unknown prefix read %d records", got)
	}
}

// The admin listener of the built binary: the Host check on /ops, the
// Bearer scheme in any case, refused tokens counted and logged, idle
// connections closed, and connections past --admin-max-conns left
// waiting while proxied traffic goes on.
func TestAdminListenerHardening(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:", "--admin", "127.0.0.1:0",
		"--admin-token", testAdminToken, "--admin-host", "ops.internal", "--admin-idle-timeout", "1s")
	adminHost := strings.TrimPrefix(p.admin, "http://")

	do := func(method, path, host string, hdr ...string) (int, string) {
		t.Helper()
		r, _ := http.NewRequest(method, p.admin+path, strings.NewReader(`{"fence":1,"release":true}`))
		r.Host = host
		r.Header.Set("Content-Type", "application/json")
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := oneShot.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	missing := strings.Repeat("ab", 32)
	t.Run("Host", func(t *testing.T) {
		for _, c := range []struct {
			method, path, host string
			want               int
		}{
			{"GET", "/ops/api/keys", "rebind.attacker.example", http.StatusMisdirectedRequest},
			{"GET", "/ops/api/keys", "rebind.attacker.example:" + strings.Split(adminHost, ":")[1], http.StatusMisdirectedRequest},
			{"GET", "/ops", "rebind.attacker.example", http.StatusMisdirectedRequest},
			{"GET", "/ops/ops.js", "rebind.attacker.example", http.StatusMisdirectedRequest},
			{"GET", "/ops/api/keys/" + missing, "rebind.attacker.example", http.StatusMisdirectedRequest},
			{"POST", "/ops/api/keys/" + missing + "/resolve", "rebind.attacker.example", http.StatusMisdirectedRequest},
			{"GET", "/ops/nothing-here", "rebind.attacker.example", http.StatusMisdirectedRequest},
			{"GET", "/ops/api/keys", adminHost, http.StatusOK},
			{"GET", "/ops/api/keys", "localhost", http.StatusOK},
			{"GET", "/ops/api/keys", "ops.internal", http.StatusOK},
			{"GET", "/ops/api/keys", "OPS.internal.:9090", http.StatusOK},
			{"GET", "/ops/api/keys", "[::1]:9090", http.StatusOK},
			{"GET", "/ops/api/keys", "10.1.2.3", http.StatusOK},
			// /metrics and the probes are for scrapers that name the
			// service as they like; they hold no record.
			{"GET", "/metrics", "prometheus-target.example", http.StatusOK},
			{"GET", "/healthz", "prometheus-target.example", http.StatusOK},
		} {
			if code, body := do(c.method, c.path, c.host); code != c.want {
				t.Errorf("%s %s Host %s: %d %s, want %d", c.method, c.path, c.host, code, body, c.want)
			}
		}
	})
	t.Run("Token", func(t *testing.T) {
		// "bearer" is the same scheme as "Bearer": the token passes, and
		// the missing record is what is refused.
		for _, scheme := range []string{"Bearer", "bearer", "BEARER"} {
			if code, body := do("POST", "/ops/api/keys/"+missing+"/resolve", adminHost, "Authorization", scheme+" "+testAdminToken); code != http.StatusNotFound {
				t.Errorf("%s scheme: %d %s, want 404 (the token accepted)", scheme, code, body)
			}
		}
		const tries = 25
		for i := range tries {
			hdr := []string{"Authorization", fmt.Sprintf("Bearer wrong-token-%04d-guess", i)}
			if i == 0 {
				hdr = []string{"Authorization", "Basic " + testAdminToken}
			}
			if code, _ := do("POST", "/ops/api/keys/"+missing+"/resolve", adminHost, hdr...); code != http.StatusUnauthorized {
				t.Fatalf("wrong token %d: %d", i, code)
			}
		}
		_, metrics := do("GET", "/metrics", adminHost)
		if !strings.Contains(metrics, fmt.Sprintf("idem_admin_auth_failures_total %d\n", tries)) {
			t.Errorf("metrics do not count %d refused tokens:\n%s", tries, grepLines(metrics, "auth"))
		}
		poll(t, "a log line about the refused tokens", func() bool { return strings.Contains(p.stderr.String(), "admin token refused") })
		logs := p.stderr.String()
		if n := strings.Count(logs, "admin token refused"); n >= tries {
			t.Errorf("%d log lines for %d refused tokens: not rate-limited", n, tries)
		}
		if strings.Contains(logs, "wrong-token-") {
			t.Errorf("a refused token reached the log:\n%s", logs)
		}
	})
	t.Run("IdleConnectionsClosed", func(t *testing.T) {
		// Keep-alive connections that made a request, and connections
		// that never send one: all closed by the server.
		var conns []net.Conn
		for i := range 12 {
			c, err := net.Dial("tcp", adminHost)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			if i%3 != 0 {
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", adminHost)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			conns = append(conns, c)
		}
		for i, c := range conns {
			c.SetReadDeadline(time.Now().Add(90 * time.Second))
			if n, err := c.Read(make([]byte, 1)); err != io.EOF {
				t.Errorf("idle connection %d: read %d bytes, %v; want the server to close it (EOF)", i, n, err)
			}
		}
	})
}

// Connections past --admin-max-conns wait until one closes, and the
// proxied traffic on the main listener goes on meanwhile.
func TestAdminListenerConnectionCap(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	p := startProxy(t, "--upstream", up.srv.URL, "--store", "memory:", "--admin", "127.0.0.1:0",
		"--admin-max-conns", "3", "--admin-idle-timeout", "10m")
	adminHost := strings.TrimPrefix(p.admin, "http://")
	request := func(c net.Conn) {
		fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n", adminHost)
	}
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", adminHost)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		request(c)
		c.SetReadDeadline(time.Now().Add(60 * time.Second))
		if _, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	extra, err := net.Dial("tcp", adminHost) // completes in the listen queue
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { extra.Close() })
	request(extra)
	answered := make(chan error, 1)
	go func() {
		extra.SetReadDeadline(time.Now().Add(120 * time.Second))
		_, err := http.ReadResponse(bufio.NewReader(extra), nil)
		answered <- err
	}()
	// While the cap is reached, proxied requests are served.
	for i := range 5 {
		if a := post(t, p.url, fmt.Sprintf("cap-%d", i), "{}"); a.status != http.StatusCreated {
			t.Fatalf("proxied request %d during the cap: %d %s", i, a.status, a.body)
		}
	}
	select {
	case err := <-answered:
		t.Fatalf("a connection past --admin-max-conns 3 was served (%v)", err)
	case <-time.After(time.Second):
	}
	held[0].Close()
	if err := <-answered; err != nil {
		t.Fatalf("the waiting connection, once a slot was free: %v", err)
	}
}

func grepLines(s, sub string) string {
	var out []string
	for l := range strings.SplitSeq(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func TestRateLimitedLog(t *testing.T) {
	t.Parallel()
	var l rateLimitedLog
	t0 := time.Unix(1000, 0)
	if ok, n := l.allow(t0); !ok || n != 0 {
		t.Fatalf("first line: %v %d", ok, n)
	}
	for i := range 5 {
		if ok, _ := l.allow(t0.Add(time.Duration(i+1) * time.Second)); ok {
			t.Fatalf("line %d within the interval was allowed", i)
		}
	}
	if ok, n := l.allow(t0.Add(authLogInterval)); !ok || n != 5 {
		t.Fatalf("after the interval: %v, %d suppressed; want true, 5", ok, n)
	}
}
