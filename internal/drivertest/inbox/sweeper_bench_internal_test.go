package inbox_test

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkSweepPass1M: one sweep pass with nothing to delete over 1,000,000
// fresh dedup rows on PostgreSQL (the steady state of a busy inbox between
// expiries), the current statement next to the old clock_timestamp() one,
// interleaved in one loop. Reports each variant's median per pass and the
// ratio old/new.
//
//	go test -run '^$' -bench SweepPass1M -benchtime 20x ./internal/drivertest/inbox
func BenchmarkSweepPass1M(b *testing.B) {
	ib, db := sweepTable(b, 1_000_000)
	ctx := context.Background()
	age := time.Hour.Microseconds()
	variants := []struct {
		name string
		stmt string
		lat  []time.Duration
	}{
		{name: "new", stmt: sweepSQL(b, ib)},
		{name: "old", stmt: oldPostgresSweep(ib.Table())},
	}
	b.ResetTimer()
	for range b.N {
		for i := range variants {
			v := &variants[i]
			t0 := time.Now()
			res, err := db.ExecContext(ctx, v.stmt, age, 1000)
			if err != nil {
				b.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 0 {
				b.Fatalf("%s deleted %d fresh rows", v.name, n)
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
	newMed, oldMed := med(variants[0].lat), med(variants[1].lat)
	b.ReportMetric(float64(newMed.Microseconds()), "new-p50-µs")
	b.ReportMetric(float64(oldMed.Microseconds()), "old-p50-µs")
	b.ReportMetric(float64(oldMed)/float64(newMed), "old/new")
}
