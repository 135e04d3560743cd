package main

// idem proxy over Redis on each client, in alternating rounds on one
// private redis-server: the go-redis store the binary used before, and the
// rueidis store that redis:// DSNs open now (storeurl.Open):
//
//	IDEM_REQUIRE_SERVICES=1 go test ./cmd/idem -run '^$' -bench ProxyRedisClients -benchtime 4000x -count 5

import (
	"log/slog"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	httpbench "github.com/idemkit/idem/cmd/idem/internal/httpbench"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisstore"
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
	gr, ru := benchProxyServer(b, up.URL, goRedis), benchProxyServer(b, up.URL, h.Store)
	for _, mode := range []httpbench.KeyMode{httpbench.UniqueKeys, httpbench.SameKey} {
		name := map[httpbench.KeyMode]string{httpbench.UniqueKeys: "first", httpbench.SameKey: "replay"}[mode]
		b.Run(name, func(b *testing.B) {
			httpbench.CompareB(b, [2]httpbench.Side{{URL: gr.URL + "/charges", Mode: mode}, {URL: ru.URL + "/charges", Mode: mode}},
				[2]string{"goredis", "rueidis"}, workers, 500, "rc-"+name+"-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"-")
		})
	}
}

// benchProxyServer serves idem proxy on store s in front of upstream, with
// flags added to its command line, until the benchmark ends.
func benchProxyServer(b *testing.B, upstream string, s idem.Store, flags ...string) *httptest.Server {
	o, err := parseProxyFlagsEnv(append([]string{"--upstream", upstream, "--store", "memory:"}, flags...), func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		b.Fatal(err)
	}
	ph, err := newProxyHandler(o, s, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(ph)
	b.Cleanup(srv.Close)
	return srv
}
