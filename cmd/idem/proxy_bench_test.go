package main

// idem proxy (memory store) against a plain httputil.ReverseProxy, over
// loopback HTTP:
//
//	go test ./cmd/idem -run '^$' -bench Proxy -benchtime 3000x -count 5

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	httpbench "github.com/idemkit/idem/cmd/idem/internal/httpbench"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/memstore"
)

func BenchmarkProxy(b *testing.B) {
	const workers = 32
	up := httptest.NewServer(httpbench.Handler())
	defer up.Close()
	target, _ := url.Parse(up.URL)

	plain := func(b *testing.B) http.Handler {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 256
		b.Cleanup(tr.CloseIdleConnections)
		return &httputil.ReverseProxy{Transport: tr, Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded()
		}}
	}
	idemProxy := func(b *testing.B) http.Handler {
		s := memstore.New(nil)
		b.Cleanup(func() { s.Close() })
		o, err := parseProxyFlags([]string{"--upstream", up.URL, "--store", "memory:"}, nil)
		if err != nil {
			b.Fatal(err)
		}
		h, err := newProxyHandler(o, s, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		return h
	}
	n := 0
	load := func(b *testing.B, h http.Handler, mode httpbench.KeyMode) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		c := httpbench.NewClient(workers)
		defer c.CloseIdleConnections()
		n++
		prefix := "p" + strconv.Itoa(n) + "-"
		if err := httpbench.WarmUp(context.Background(), c, srv.URL+"/charges", workers, mode, prefix); err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		d, bad, err := httpbench.Load(context.Background(), c, srv.URL+"/charges", workers, b.N, mode, prefix)
		b.StopTimer()
		if err != nil || bad > 0 {
			b.Fatalf("load: %v, %d non-2xx", err, bad)
		}
		b.ReportMetric(float64(b.N)/d.Seconds(), "req/s")
	}
	// Alternating rounds, so both sides see the same machine load.
	for _, mode := range []httpbench.KeyMode{httpbench.UniqueKeys, httpbench.SameKey} {
		name := map[httpbench.KeyMode]string{httpbench.UniqueKeys: "first", httpbench.SameKey: "replay"}[mode]
		b.Run("ratio/"+name, func(b *testing.B) {
			p := httptest.NewServer(plain(b))
			defer p.Close()
			i := httptest.NewServer(idemProxy(b))
			defer i.Close()
			n++
			rates, cpu, err := httpbench.Compare(context.Background(), []httpbench.Side{{URL: p.URL + "/charges", Mode: httpbench.UniqueKeys}, {URL: i.URL + "/charges", Mode: mode}},
				workers, b.N, 500, "c"+strconv.Itoa(n)+"-")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rates[0], "reverseproxy-req/s")
			b.ReportMetric(rates[1], "idem-req/s")
			b.ReportMetric(rates[1]/rates[0], "ratio")
			b.ReportMetric(float64(cpu[0].Microseconds()), "reverseproxy-cpu-µs/req")
			b.ReportMetric(float64(cpu[1].Microseconds()), "idem-cpu-µs/req")
			b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "cpu-ratio")
		})
	}
	b.Run("reverseproxy", func(b *testing.B) { load(b, plain(b), httpbench.UniqueKeys) })
	b.Run("idem/first", func(b *testing.B) { load(b, idemProxy(b), httpbench.UniqueKeys) })
	b.Run("idem/replay", func(b *testing.B) { load(b, idemProxy(b), httpbench.SameKey) })
}

// BenchmarkProxyMark is the cost of the at-most-once mark: first requests
// through idem proxy in hold mode (Begin, MarkStarted, Complete) against
// release mode (Begin, Complete), on one store, in alternating rounds:
//
//	IDEM_REQUIRE_SERVICES=1 go test ./cmd/idem -run '^$' -bench ProxyMark -benchtime 2000x -count 5
func BenchmarkProxyMark(b *testing.B) {
	const workers = 16
	up := httptest.NewServer(httpbench.Handler())
	defer up.Close()
	for _, st := range []struct {
		name string
		dsn  func(b *testing.B) string
	}{
		{"sqlite", func(b *testing.B) string { return "sqlite:" + b.TempDir() + "/idem.db" }},
		{"postgres", func(b *testing.B) string { _, dsn := testenv.PostgresDB(b); return dsn }},
		{"redis", func(b *testing.B) string { return testenv.StartRedis(b).URL() }},
	} {
		b.Run(st.name, func(b *testing.B) {
			h, err := openStore(context.Background(), st.dsn(b))
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			rel, hold := benchProxyServer(b, up.URL, h.Store, "--unknown-outcome", "release"), benchProxyServer(b, up.URL, h.Store, "--unknown-outcome", "hold")
			rates, cpu, err := httpbench.Compare(context.Background(), []httpbench.Side{{URL: rel.URL + "/charges", Mode: httpbench.UniqueKeys}, {URL: hold.URL + "/charges", Mode: httpbench.UniqueKeys}},
				workers, b.N, 200, "m-"+st.name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rates[0], "release-req/s")
			b.ReportMetric(rates[1], "hold-req/s")
			b.ReportMetric(rates[1]/rates[0], "ratio")
			b.ReportMetric(float64(cpu[0].Microseconds()), "release-cpu-µs/req")
			b.ReportMetric(float64(cpu[1].Microseconds()), "hold-cpu-µs/req")
		})
	}
}
