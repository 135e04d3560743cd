package fsm_test

import (
	"context"
	"fmt"
	"github.com/idemkit/idem/fsm"
	"testing"
	"time"
)

// seed inserts rows 1..n in state CREATED.
func (e *env) seed(n int) {
	e.t.Helper()
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	stmt, err := tx.PrepareContext(ctx, fmt.Sprintf("INSERT INTO %s (id, status, version) VALUES (%s, 'CREATED', 0)", e.table, e.ph(1)))
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := stmt.ExecContext(ctx, i); err != nil {
			e.t.Fatal(err)
		}
	}
	stmt.Close()
	if err := tx.Commit(); err != nil {
		e.t.Fatal(err)
	}
}

// BenchmarkFire compares one applied transition with the same work written by
// hand against database/sql:
//
//	fsm        Machine.Fire(ctx, db, id, "pay", nil)
//	raw-same   the exact statement Fire sends (UPDATE … RETURNING version,
//	           LAST_INSERT_ID on MySQL), through db.QueryRowContext/ExecContext
//	raw-exec   UPDATE … SET status, version = version + 1 WHERE id AND status,
//	           through db.ExecContext + RowsAffected (no version returned)
//
// Every iteration moves a fresh row (a transition runs once per row).
func BenchmarkFire(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			b.Run("fsm", func(b *testing.B) {
				e := newEnv(b, d)
				m := e.machine(nil)
				e.seed(b.N)
				b.ResetTimer()
				for i := 1; i <= b.N; i++ {
					res, err := m.Fire(ctx, e.db, int64(i), "pay", nil)
					if err != nil || res.Outcome != fsm.Applied {
						b.Fatal(res, err)
					}
				}
			})
			b.Run("raw-same", func(b *testing.B) {
				e := newEnv(b, d)
				m := e.machine(nil)
				tr, _ := m.Transition("pay")
				q := updateSQL(b, m, tr, 0, &fsm.Options{}) // built once, as a hand-written constant would be
				e.seed(b.N)
				b.ResetTimer()
				for i := 1; i <= b.N; i++ {
					args := []any{"PAID", int64(i), "CREATED"}
					var v int64
					if d == fsm.MySQL {
						res, err := e.db.ExecContext(ctx, q, args...)
						if err != nil {
							b.Fatal(err)
						}
						if n, _ := res.RowsAffected(); n != 1 {
							b.Fatal(n)
						}
						v, _ = res.LastInsertId()
					} else if err := e.db.QueryRowContext(ctx, q, args...).Scan(&v); err != nil {
						b.Fatal(err)
					}
					if v != 1 {
						b.Fatal(v)
					}
				}
			})
			b.Run("raw-exec", func(b *testing.B) {
				e := newEnv(b, d)
				q := fmt.Sprintf("UPDATE %s SET status = %s, version = version + 1 WHERE id = %s AND status = %s",
					e.table, e.ph(1), e.ph(2), e.ph(3))
				e.seed(b.N)
				b.ResetTimer()
				for i := 1; i <= b.N; i++ {
					res, err := e.db.ExecContext(ctx, q, "PAID", int64(i), "CREATED")
					if err != nil {
						b.Fatal(err)
					}
					if n, _ := res.RowsAffected(); n != 1 {
						b.Fatal(n)
					}
				}
			})
		})
	}
}

// BenchmarkFireDuplicate measures the slow path: a retry of a transition that
// already applied (UPDATE matching nothing + one classifying read).
func BenchmarkFireDuplicate(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			e := newEnv(b, d)
			m := e.machine(nil)
			e.insert(1, "PAID", 1)
			b.ResetTimer()
			for b.Loop() {
				res, err := m.Fire(ctx, e.db, int64(1), "pay", nil)
				if err != nil || res.Outcome != fsm.Duplicate {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// BenchmarkFirePaired runs Fire and the hand-written raw-same statement in
// alternation inside one loop and reports each one's mean latency and their
// ratio, so that load on a shared machine hits both alike. One op = one of
// each.
func BenchmarkFirePaired(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			e := newEnv(b, d)
			m := e.machine(nil)
			tr, _ := m.Transition("pay")
			q := updateSQL(b, m, tr, 0, &fsm.Options{})
			e.seed(2 * b.N)
			raw := func(id int64) {
				var v int64
				if d == fsm.MySQL {
					res, err := e.db.ExecContext(ctx, q, "PAID", id, "CREATED")
					if err != nil {
						b.Fatal(err)
					}
					if n, _ := res.RowsAffected(); n != 1 {
						b.Fatal(n)
					}
					v, _ = res.LastInsertId()
				} else if err := e.db.QueryRowContext(ctx, q, "PAID", id, "CREATED").Scan(&v); err != nil {
					b.Fatal(err)
				}
				if v != 1 {
					b.Fatal(v)
				}
			}
			lib := func(id int64) {
				if res, err := m.Fire(ctx, e.db, id, "pay", nil); err != nil || res.Outcome != fsm.Applied {
					b.Fatal(res, err)
				}
			}
			var tLib, tRaw time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				a, c := int64(2*i+1), int64(2*i+2)
				if i%2 == 0 {
					t0 := time.Now()
					lib(a)
					t1 := time.Now()
					raw(c)
					tLib, tRaw = tLib+t1.Sub(t0), tRaw+time.Since(t1)
				} else {
					t0 := time.Now()
					raw(c)
					t1 := time.Now()
					lib(a)
					tRaw, tLib = tRaw+t1.Sub(t0), tLib+time.Since(t1)
				}
			}
			b.ReportMetric(float64(tLib.Microseconds())/float64(b.N), "fsm-µs/op")
			b.ReportMetric(float64(tRaw.Microseconds())/float64(b.N), "raw-µs/op")
			b.ReportMetric(float64(tLib)/float64(tRaw), "fsm/raw")
		})
	}
}
