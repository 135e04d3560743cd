package redisinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/internal/redistest"
	"github.com/idemkit/idem/redis/redisinbox"
)

// BenchmarkBlackHoledRedis: new messages through Process on PostgreSQL with
// no fast path, with a healthy Redis fast path, and with a black-holed one
// (connections open, nothing answers; Timeout 200ms, FastPathBackoff 1s),
// interleaved in one loop. Reports each variant's median and the ratios to
// "db": the black-holed fast path costs one timeout per backoff, not one per
// message, so its median stays at database speed.
//
//	go test -run '^$' -bench BlackHoledRedis -benchtime 300x -count 3 ./redis/internal/drivertest/redisinbox
func BenchmarkBlackHoledRedis(b *testing.B) {
	db, _ := testenv.PostgresDB(b)
	ctx := context.Background()
	type variant struct {
		name string
		ib   *inbox.Inbox
		lat  []time.Duration
	}
	newInbox := func(fast inbox.FastPath) *inbox.Inbox {
		ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: testenv.Name("inbox"), FastPath: fast, Logger: quietSlog()})
		if err != nil {
			b.Fatal(err)
		}
		if err := ib.Migrate(ctx); err != nil {
			b.Fatal(err)
		}
		return ib
	}
	fastVia := func(hole bool) inbox.FastPath {
		rdb, proxy, prefix := proxiedRedis(b, true)
		fp, err := redisinbox.New(rdb, &redisinbox.Config{Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		if hole {
			proxy.Set(testenv.BlackHole)
		}
		return fp
	}
	vs := []*variant{
		{name: "db", ib: newInbox(nil)},
		{name: "redis", ib: newInbox(fastVia(false))},
		{name: "blackholed", ib: newInbox(fastVia(true))},
	}
	noop := func(context.Context, *sql.Tx) error { return nil }
	b.ResetTimer()
	for i := range b.N {
		for _, v := range vs {
			t0 := time.Now()
			if _, err := v.ib.Process(ctx, "c", fmt.Sprint("m", i), noop); err != nil {
				b.Fatal(err)
			}
			v.lat = append(v.lat, time.Since(t0))
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	base := med(vs[0].lat)
	for _, v := range vs {
		m := med(v.lat)
		b.ReportMetric(float64(m.Microseconds()), v.name+"-p50-µs")
		if v != vs[0] {
			b.ReportMetric(float64(m)/float64(base), v.name+"/db")
		}
	}
	b.ReportMetric(float64(vs[2].ib.Stats().FastPathErrors), "blackholed-redis-calls")
}

// BenchmarkFastPath: what a delivery costs the fast path on each client,
// from 8×GOMAXPROCS goroutines: "new" is Claim of a fresh key then
// Complete (two scripts, a first delivery), "duplicate" is Claim of a
// completed key (one script, a redelivery answered by Redis).
//
//	go test -run '^$' -bench FastPath -benchtime 20000x -count 5 ./redis/internal/drivertest/redisinbox
func BenchmarkFastPath(b *testing.B) {
	for _, kind := range []string{goRedisClient, rueidisClient} {
		b.Run(kind, func(b *testing.B) {
			rdb, prefix := redistest.RedisClient(b)
			fp := fastOn(b, kind, rdb, &redisinbox.Config{Prefix: prefix, Timeout: 10 * time.Second})
			ctx := context.Background()
			var seq atomic.Int64 // across the runs of "new": every key is fresh
			b.Run("new", func(b *testing.B) {
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						key := fmt.Sprint("n", seq.Add(1))
						st, tok, err := fp.Claim(ctx, key)
						if err != nil || st != inbox.FastClaimed {
							b.Fatal(st, err)
						}
						if err := fp.Complete(ctx, key, tok); err != nil {
							b.Fatal(err)
						}
					}
				})
			})
			b.Run("duplicate", func(b *testing.B) {
				if err := fp.Complete(ctx, "done", ""); err != nil {
					b.Fatal(err)
				}
				b.SetParallelism(8)
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if st, _, err := fp.Claim(ctx, "done"); err != nil || st != inbox.FastDone {
							b.Fatal(st, err)
						}
					}
				})
			})
		})
	}
}
