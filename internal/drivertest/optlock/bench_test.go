package optlock_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemkit/idem/optlock"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIncrement compares one uncontended increment of a row:
//
//	optlock   Do + SELECT balance, version + Table.Update (2 statements)
//	raw-cas   the same SELECT and UPDATE … WHERE version = ? written by hand
//	          against database/sql (2 statements, no retry loop)
//	raw-add   UPDATE … SET balance = balance + 1 (1 statement, no read: the
//	          floor for an increment, but not a read-modify-write)
func BenchmarkIncrement(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			b.Run("optlock", func(b *testing.B) {
				e := newEnv(b, d)
				e.insert(1, 0, 0)
				for b.Loop() {
					err := optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
						a, err := e.read(ctx, e.db, 1)
						if err != nil {
							return err
						}
						return e.tbl.Update(ctx, e.db, int64(1), a.Version, map[string]any{"balance": a.Balance + 1})
					})
					if err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("raw-cas", func(b *testing.B) {
				e := newEnv(b, d)
				e.insert(1, 0, 0)
				q := fmt.Sprintf("UPDATE %s SET balance = %s, version = version + 1 WHERE id = %s AND version = %s",
					e.table, e.ph(1), e.ph(2), e.ph(3))
				for b.Loop() {
					a, err := e.read(ctx, e.db, 1)
					if err != nil {
						b.Fatal(err)
					}
					res, err := e.db.ExecContext(ctx, q, a.Balance+1, int64(1), a.Version)
					if err != nil {
						b.Fatal(err)
					}
					if n, _ := res.RowsAffected(); n != 1 {
						b.Fatal(n)
					}
				}
			})
			b.Run("raw-add", func(b *testing.B) {
				e := newEnv(b, d)
				e.insert(1, 0, 0)
				q := fmt.Sprintf("UPDATE %s SET balance = balance + 1 WHERE id = %s", e.table, e.ph(1))
				for b.Loop() {
					if _, err := e.db.ExecContext(ctx, q, int64(1)); err != nil {
						b.Fatal(err)
					}
				}
			})
		})
	}
}

// BenchmarkIncrementPaired alternates an optlock increment (Do + read +
// Table.Update) and the same read + CAS written by hand in one loop, and
// reports each one's mean latency and their ratio, so that load on a shared
// machine hits both alike. One op = one of each.
func BenchmarkIncrementPaired(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			ctx := context.Background()
			e := newEnv(b, d)
			e.insert(1, 0, 0)
			e.insert(2, 0, 0)
			q := fmt.Sprintf("UPDATE %s SET balance = %s, version = version + 1 WHERE id = %s AND version = %s",
				e.table, e.ph(1), e.ph(2), e.ph(3))
			lib := func() {
				err := optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
					a, err := e.read(ctx, e.db, 1)
					if err != nil {
						return err
					}
					return e.tbl.Update(ctx, e.db, int64(1), a.Version, map[string]any{"balance": a.Balance + 1})
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			raw := func() {
				a, err := e.read(ctx, e.db, 2)
				if err != nil {
					b.Fatal(err)
				}
				res, err := e.db.ExecContext(ctx, q, a.Balance+1, int64(2), a.Version)
				if err != nil {
					b.Fatal(err)
				}
				if n, _ := res.RowsAffected(); n != 1 {
					b.Fatal(n)
				}
			}
			var tLib, tRaw time.Duration
			for i := 0; b.Loop(); i++ {
				first, second, t1st, t2nd := lib, raw, &tLib, &tRaw
				if i%2 == 1 {
					first, second, t1st, t2nd = raw, lib, &tRaw, &tLib
				}
				t0 := time.Now()
				first()
				t1 := time.Now()
				second()
				*t1st += t1.Sub(t0)
				*t2nd += time.Since(t1)
			}
			b.ReportMetric(float64(tLib.Microseconds())/float64(b.N), "optlock-µs/op")
			b.ReportMetric(float64(tRaw.Microseconds())/float64(b.N), "raw-µs/op")
			b.ReportMetric(float64(tLib)/float64(tRaw), "optlock/raw")
		})
	}
}

// BenchmarkContention measures what the default Config (5 attempts, 5ms base
// delay, 250ms cap) yields when W writers increment one row at once, each
// attempt holding one of 4 pooled connections for its read and its write:
//
//	calls/op    how often fn ran per successful increment (≥ 1)
//	gaveup-%    the share of Do calls that ran out of attempts (ErrConflict;
//	            the benchmark then calls Do again, as a caller retrying later)
//
// One op is one successful increment. The final balance is checked against
// the number of successes: no update is lost, none is applied twice.
func BenchmarkContention(b *testing.B) {
	for _, d := range dialects {
		for _, writers := range []int{2, 10, 50} {
			b.Run(fmt.Sprintf("%s/writers=%d", d, writers), func(b *testing.B) {
				e := newEnv(b, d)
				e.db.SetMaxOpenConns(4)
				e.insert(1, 0, 0)
				var calls, doCalls, gaveUp, done atomic.Int64
				per := max(b.N/writers, 1)
				b.ResetTimer()
				var wg sync.WaitGroup
				for range writers {
					wg.Go(func() {
						ctx := context.Background()
						for n := 0; n < per; {
							doCalls.Add(1)
							err := optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
								calls.Add(1)
								conn, err := e.db.Conn(ctx)
								if err != nil {
									return err
								}
								defer conn.Close()
								a, err := e.read(ctx, conn, 1)
								if err != nil {
									return err
								}
								return e.tbl.Update(ctx, conn, int64(1), a.Version, map[string]any{"balance": a.Balance + 1})
							})
							switch {
							case err == nil:
								n++
								done.Add(1)
							case errors.Is(err, optlock.ErrConflict):
								gaveUp.Add(1)
							default:
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
				b.StopTimer()
				if a := e.row(1); a.Balance != done.Load() {
					b.Fatalf("balance %d after %d increments", a.Balance, done.Load())
				}
				b.ReportMetric(float64(calls.Load())/float64(done.Load()), "calls/op")
				b.ReportMetric(100*float64(gaveUp.Load())/float64(doCalls.Load()), "gaveup-%")
			})
		}
	}
}
