package inboxredis_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/inboxredis"
	"github.com/idemkit/idem/internal/testenv"
)

// BenchmarkBlackHoledRedis: new messages through Process on PostgreSQL with
// no fast path, with a healthy Redis fast path, and with a black-holed one
// (connections open, nothing answers; Timeout 200ms, FastPathBackoff 1s),
// interleaved in one loop. Reports each variant's median and the ratios to
// "db": the black-holed fast path costs one timeout per backoff, not one per
// message, so its median stays at database speed.
//
//	go test -run '^$' -bench BlackHoledRedis -benchtime 300x -count 3 ./inbox/inboxredis/
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
		fp, err := inboxredis.New(rdb, &inboxredis.Config{Prefix: prefix})
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
