package main

// idem proxy over Redis on each client, in alternating rounds on one
// private redis-server: the go-redis store the binary used before, and the
// rueidis store that redis:// DSNs open now (storeurl.Open):
//
//	IDEM_REQUIRE_SERVICES=1 go test ./cmd/idem -run '^$' -bench ProxyRedisClients -benchtime 4000x -count 5

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	httpbench "github.com/idemkit/idem/bench/http"
	"github.com/idemkit/idem/internal/storeurl"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redisstore"
)

func BenchmarkProxyRedisClients(b *testing.B) {
	const workers = 32
	up := httptest.NewServer(httpbench.Handler())
	defer up.Close()
	srv := testenv.StartRedis(b)

	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer rdb.Close()
	goRedis, err := redisstore.New(rdb, nil)
	if err != nil {
		b.Fatal(err)
	}
	d, err := storeurl.Parse(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	h, err := storeurl.Open(d)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	proxy := func(s idem.Store) *httptest.Server {
		o, err := parseProxyFlagsEnv([]string{"--upstream", up.URL, "--store", "memory:"}, func(string) (string, bool) { return "", false }, nil)
		if err != nil {
			b.Fatal(err)
		}
		ph, err := newProxyHandler(o, s, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		return httptest.NewServer(ph)
	}
	gr, ru := proxy(goRedis), proxy(h.Store)
	defer gr.Close()
	defer ru.Close()
	for _, mode := range []httpbench.KeyMode{httpbench.UniqueKeys, httpbench.SameKey} {
		name := map[httpbench.KeyMode]string{httpbench.UniqueKeys: "first", httpbench.SameKey: "replay"}[mode]
		b.Run(name, func(b *testing.B) {
			rates, cpu, err := httpbench.Compare(context.Background(), []httpbench.Side{{URL: gr.URL + "/charges", Mode: mode}, {URL: ru.URL + "/charges", Mode: mode}},
				workers, b.N, 500, "rc-"+name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rates[0], "goredis-req/s")
			b.ReportMetric(rates[1], "rueidis-req/s")
			b.ReportMetric(rates[1]/rates[0], "ratio")
			b.ReportMetric(float64(cpu[0].Microseconds()), "goredis-cpu-µs/req")
			b.ReportMetric(float64(cpu[1].Microseconds()), "rueidis-cpu-µs/req")
		})
	}
}
