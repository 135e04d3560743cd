package tiered_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/tiered"
)

// Replay throughput of the tiered store (Redis answers) against the durable
// store alone (PostgreSQL answers), and the cost of the fast layer on a
// first request (Begin+Complete). The durable-only figures are the
// baseline measured in the same run.

const benchParallelism = 8

var benchResult = make([]byte, 64)

func benchStores(b *testing.B) map[string]idem.Store {
	d, _, _ := durableOnPostgres(b)
	return map[string]idem.Store{
		"tiered":  newTiered(b, fastOnShared(b), d, nil),
		"durable": d,
	}
}

func completed(b *testing.B, s idem.Store) idem.BeginRequest {
	req := idem.BeginRequest{Key: idem.MustKey("bench", testenv.Name("r")), Fingerprint: idem.FingerprintOf([]byte("x"))}
	c, err := s.Begin(context.Background(), req)
	if err == nil {
		err = s.Complete(context.Background(), c.Owner, benchResult)
	}
	if err != nil {
		b.Fatal(err)
	}
	return req
}

func benchReplay(b *testing.B, parallel bool) {
	for _, name := range []string{"durable", "tiered"} {
		b.Run(name, func(b *testing.B) {
			s := benchStores(b)[name]
			req := completed(b, s)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			one := func() bool {
				c, err := s.Begin(ctx, req)
				return err == nil && c.Outcome == idem.Replay
			}
			if !parallel {
				for i := 0; i < b.N; i++ {
					if !one() {
						b.Fatal("not a replay")
					}
				}
				return
			}
			b.SetParallelism(benchParallelism)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if !one() {
						b.Error("not a replay")
						return
					}
				}
			})
		})
	}
}

func BenchmarkReplay(b *testing.B)         { benchReplay(b, false) }
func BenchmarkReplayParallel(b *testing.B) { benchReplay(b, true) }

func benchFirst(b *testing.B, parallel, mark bool) {
	for _, name := range []string{"durable", "tiered"} {
		b.Run(name, func(b *testing.B) { benchFirstOne(b, name, parallel, mark) })
	}
}

func benchFirstOne(b *testing.B, name string, parallel, mark bool) {
	s := benchStores(b)[name]
	prefix := testenv.Name("f")
	keys := make([]idem.Key, b.N)
	for i := range keys {
		keys[i] = idem.MustKey("bench", prefix+"-"+strconv.Itoa(i))
	}
	ctx := context.Background()
	var next atomic.Int64
	one := func() error {
		c, err := s.Begin(ctx, idem.BeginRequest{Key: keys[next.Add(1)-1], Retention: time.Minute})
		if err != nil {
			return err
		}
		if mark {
			if err := s.MarkStarted(ctx, c.Owner); err != nil {
				return err
			}
		}
		return s.Complete(ctx, c.Owner, benchResult)
	}
	b.ReportAllocs()
	b.ResetTimer()
	if !parallel {
		for i := 0; i < b.N; i++ {
			if err := one(); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(benchParallelism)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := one(); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportFastErrors(b, s)
}

// reportFastErrors shows fast-store failures (timeouts under load), which
// send requests to the durable store alone.
func reportFastErrors(b *testing.B, s idem.Store) {
	if t, ok := s.(*tiered.Store); ok {
		b.ReportMetric(float64(t.Stats().FastErrors), "fast-errors")
	}
}

func BenchmarkBeginComplete(b *testing.B)         { benchFirst(b, false, false) }
func BenchmarkBeginCompleteParallel(b *testing.B) { benchFirst(b, true, false) }

// BenchmarkMarkCost: a first request through tiered with and without the
// at-most-once mark (MarkStarted goes to the durable store only),
// alternating under -count so that the runs pair up in time.
func BenchmarkMarkCost(b *testing.B) {
	b.Run("without", func(b *testing.B) { benchFirstOne(b, "tiered", false, false) })
	b.Run("with", func(b *testing.B) { benchFirstOne(b, "tiered", false, true) })
}
