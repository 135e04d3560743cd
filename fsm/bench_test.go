package fsm

import "testing"

// BenchmarkUpdateSQL is the package's own CPU cost per Fire on the applied
// path: validating options and building the statement (no database).
func BenchmarkUpdateSQL(b *testing.B) {
	m, err := New(Postgres, "orders", orderDef(), nil)
	if err != nil {
		b.Fatal(err)
	}
	tr, _ := m.Transition("cancel")
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := m.updateSQL(tr, int64(1), &Options{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("version+set", func(b *testing.B) {
		opts := &Options{Version: ptr[int64](3), Set: map[string]any{"note": "x"}}
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := m.updateSQL(tr, int64(1), opts); err != nil {
				b.Fatal(err)
			}
		}
	})
}
