package optlock

import "testing"

// BenchmarkUpdateSQL is the package's own CPU cost per Update: checking the
// column names and building the statement (no database).
func BenchmarkUpdateSQL(b *testing.B) {
	tbl, err := NewTable(Postgres, "accounts", nil)
	if err != nil {
		b.Fatal(err)
	}
	set := map[string]any{"balance": 1}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := tbl.updateSQL(int64(1), 7, set); err != nil {
			b.Fatal(err)
		}
	}
}
