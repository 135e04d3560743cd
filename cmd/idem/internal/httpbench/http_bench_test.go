package httpbench

// Run (see BENCHMARKS.md, section "httpidem and idem proxy"):
//
//	IDEM_REQUIRE_SERVICES=1 go test ./cmd/idem/internal/httpbench -run '^$' -bench . -benchtime 3000x -count 5

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/cmd/idem/internal/storeurl"
	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/redis/redisstore"
	"github.com/idemkit/idem/tiered"
)

const workers = 32

// stores opens each benchmarked store, isolated for this benchmark.
var stores = []struct {
	name string
	open func(b *testing.B) idem.Store
}{
	{"memstore", func(b *testing.B) idem.Store {
		s := memstore.New(nil)
		b.Cleanup(func() { s.Close() })
		return s
	}},
	{"sqlite", func(b *testing.B) idem.Store { return openURL(b, "sqlite:"+testenv.SQLitePath(b)) }},
	{"postgres", func(b *testing.B) idem.Store { _, dsn := testenv.PostgresDB(b); return openURL(b, dsn) }},
	{"redis", openRedis},
	{"tiered", func(b *testing.B) idem.Store {
		_, dsn := testenv.PostgresDB(b)
		t, err := tiered.New(openRedis(b), openURL(b, dsn), &tiered.Config{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		return t
	}},
}

func openURL(b *testing.B, dsn string) idem.Store {
	d, err := storeurl.Parse(dsn)
	if err != nil {
		b.Fatal(err)
	}
	h, err := storeurl.Open(d)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { h.Close() })
	if err := h.Prepare(context.Background()); err != nil {
		b.Fatal(err)
	}
	return h.Store
}

func openRedis(b *testing.B) idem.Store {
	c, prefix := redisClient(b)
	// redisstore.New refuses a client that ignores context deadlines.
	opt := *c.Options()
	opt.ContextTimeoutEnabled = true
	c = redis.NewClient(&opt)
	b.Cleanup(func() { c.Close() })
	s, err := redisstore.New(c, &redisstore.Config{Prefix: prefix, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

var run atomic.Int64

func loadServer(b *testing.B, h http.Handler, mode KeyMode) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	client := NewClient(workers)
	defer client.CloseIdleConnections()
	prefix := "b" + strconv.FormatInt(run.Add(1), 10) + "-"
	// Warm up connections (and, for replays, store the first result).
	if err := WarmUp(context.Background(), client, srv.URL+"/charges", workers, mode, prefix); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	d, bad, err := Load(context.Background(), client, srv.URL+"/charges", workers, b.N, mode, prefix)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if bad > 0 {
		b.Fatalf("%d non-2xx answers", bad)
	}
	b.ReportMetric(float64(b.N)/d.Seconds(), "req/s")
}

func middleware(b testing.TB, s idem.Store) http.Handler {
	mw, err := httpidem.New(s, &httpidem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	return mw.Handler(Handler())
}

// BenchmarkHTTP: requests/s over loopback HTTP with 32 keep-alive
// connections, for the bare handler and the middleware on each store.
// "first" sends a new key per request (every request executes and is
// stored); "replay" repeats one key.
func BenchmarkHTTP(b *testing.B) {
	b.Run("bare", func(b *testing.B) { loadServer(b, Handler(), UniqueKeys) })
	for _, st := range stores {
		b.Run(st.name+"/first", func(b *testing.B) { loadServer(b, middleware(b, st.open(b)), UniqueKeys) })
		b.Run(st.name+"/replay", func(b *testing.B) { loadServer(b, middleware(b, st.open(b)), SameKey) })
	}
}

// BenchmarkStoreFloor: the store's own Begin+Complete per second from 32
// goroutines, with a fresh key per operation: the ceiling the middleware
// on that store can reach.
func BenchmarkStoreFloor(b *testing.B) {
	for _, st := range stores {
		b.Run(st.name, func(b *testing.B) {
			s := st.open(b)
			ctx := context.Background()
			result := make([]byte, 180) // about one stored response
			prefix := "f" + strconv.FormatInt(run.Add(1), 10) + "-"
			var next atomic.Int64
			var wg sync.WaitGroup
			var failed atomic.Value
			b.ResetTimer()
			start := time.Now()
			for range workers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						key := idem.MustKey("bench", prefix+strconv.FormatInt(i, 10))
						c, err := s.Begin(ctx, idem.BeginRequest{Key: key})
						if err == nil {
							err = s.Complete(ctx, c.Owner, result)
						}
						if err != nil {
							failed.Store(err)
							return
						}
					}
				})
			}
			wg.Wait()
			d := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/d.Seconds(), "ops/s")
		})
	}
}

// BenchmarkRatio measures the bare handler and the middleware on memstore
// in alternating rounds (see Compare) and reports both throughputs and
// their ratio: the figure the ≥ 0.95× goal is about.
func BenchmarkRatio(b *testing.B) {
	for _, mode := range []KeyMode{UniqueKeys, SameKey} {
		name := map[KeyMode]string{UniqueKeys: "first", SameKey: "replay"}[mode]
		b.Run("memstore/"+name, func(b *testing.B) {
			bare := httptest.NewServer(Handler())
			defer bare.Close()
			ms := stores[0].open(b)
			mw := httptest.NewServer(middleware(b, ms))
			defer mw.Close()
			b.ResetTimer()
			rates, cpu, err := Compare(context.Background(), []Side{{bare.URL + "/charges", UniqueKeys}, {mw.URL + "/charges", mode}},
				workers, b.N, 500, "r"+strconv.FormatInt(run.Add(1), 10)+"-")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(rates[0], "bare-req/s")
			b.ReportMetric(rates[1], "idem-req/s")
			b.ReportMetric(rates[1]/rates[0], "ratio")
			b.ReportMetric(float64(cpu[0].Microseconds()), "bare-cpu-µs/req")
			b.ReportMetric(float64(cpu[1].Microseconds()), "idem-cpu-µs/req")
			b.ReportMetric(float64(cpu[0])/float64(cpu[1]), "cpu-ratio")
		})
	}
}

// redisClient connects to the shared test Redis and returns a client and a
// key prefix unique to this benchmark, whose keys are deleted at the end
// (redis/internal/redistest.RedisClient, which this module cannot import).
func redisClient(tb testing.TB) (*redis.Client, string) {
	tb.Helper()
	opt, err := redis.ParseURL(testenv.Redis.Need(tb))
	if err != nil {
		tb.Fatalf("IDEM_TEST_REDIS: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		testenv.Unavailable(tb, "Redis", err)
	}
	prefix := testenv.Name("idemt") + ":"
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		iter := c.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			c.Del(ctx, iter.Val())
		}
		c.Close()
	})
	return c, prefix
}
