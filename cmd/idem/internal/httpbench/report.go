package httpbench

import (
	"context"
	"testing"
)

// CompareB is Compare of two sides inside a benchmark: b.N requests per
// side, and on b each side's requests per second and CPU µs per request,
// under names[0] and names[1] ("goredis-req/s", …), and the ratio of the
// second side's rate to the first's. It fails b on an error.
func CompareB(b *testing.B, sides [2]Side, names [2]string, workers, round int, prefix string) {
	b.Helper()
	rates, cpu, err := Compare(context.Background(), sides[:], workers, b.N, round, prefix)
	if err != nil {
		b.Fatal(err)
	}
	for i, name := range names {
		b.ReportMetric(rates[i], name+"-req/s")
		b.ReportMetric(float64(cpu[i].Microseconds()), name+"-cpu-µs/req")
	}
	b.ReportMetric(rates[1]/rates[0], "ratio")
}
