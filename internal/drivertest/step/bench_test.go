package step_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/step"
)

// BenchmarkRecoveryPoint: the cost of a local step's recovery point on
// PostgreSQL, ÷ the business transaction alone.
//
//		go test -run '^$' -bench RecoveryPoint -benchtime 1000x -count 5 ./internal/drivertest/step
//
//	  - tx: BEGIN, one business INSERT, COMMIT.
//	  - local: the same transaction as a local step (step.Run, SaveWith with
//	    sqlstore's StepTx): BEGIN, INSERT, the fenced recovery point, COMMIT.
//	  - own: the transaction, then the recovery point in its own statement
//	    (Store.SaveStep, as Run stores a foreign step's result).
//
// The variants are interleaved in one loop (tx, local, own, tx, …) and
// each reports its median latency (…-p50-µs) and its ratio to tx: load
// drift on the shared machine then hits all alike.
func BenchmarkRecoveryPoint(b *testing.B) {
	ctx := context.Background()
	r := newRig(b, backends[1], nil)
	db := r.db
	sent := time.Now()
	c, err := r.store.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("bench", testenv.Name("op")), Lease: time.Hour, Retention: 2 * time.Hour})
	if err != nil || c.Outcome != idem.Acquired {
		b.Fatal(c.Outcome, err)
	}
	// The claim's owner reaches step.Load in the work context of an
	// Attempt, as an adapter's work gets it.
	var a idem.Attempt
	wctx, err := a.Start(ctx, &idem.Claimer{Store: r.store}, idem.Ticket{Claim: c, Sent: sent, Lease: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	defer a.End()
	op, err := step.Load(wctx, r.store)
	if err != nil {
		b.Fatal(err)
	}
	insert := r.q("INSERT INTO {eff} (id, step, fence) VALUES ('bench', ?, ?)")
	type variant struct {
		name string
		op   func(i int) error
		lat  []time.Duration
	}
	vs := []*variant{
		{name: "tx", op: func(i int) error {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, insert, "tx", i); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		}},
		{name: "local", op: func(i int) error {
			_, err := step.Run(ctx, op, fmt.Sprint("local-", b.N, "-", i), nil, func(ctx context.Context, s *step.Step) (int, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return 0, err
				}
				if _, err := tx.ExecContext(ctx, insert, "local", i); err != nil {
					_ = tx.Rollback()
					return 0, err
				}
				if err := s.SaveWith(ctx, i, r.sql.StepTx(tx)); err != nil {
					_ = tx.Rollback()
					return 0, err
				}
				return i, tx.Commit()
			})
			return err
		}},
		{name: "own", op: func(i int) error {
			_, err := step.Run(ctx, op, fmt.Sprint("own-", b.N, "-", i), nil, func(ctx context.Context, s *step.Step) (int, error) {
				tx, err := db.BeginTx(ctx, nil)
				if err != nil {
					return 0, err
				}
				if _, err := tx.ExecContext(ctx, insert, "own", i); err != nil {
					_ = tx.Rollback()
					return 0, err
				}
				return i, tx.Commit()
			})
			return err
		}},
	}
	b.ResetTimer()
	for i := range b.N {
		for _, v := range vs {
			t0 := time.Now()
			if err := v.op(i); err != nil {
				b.Fatal(v.name, err)
			}
			v.lat = append(v.lat, time.Since(t0))
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	base := median(vs[0].lat)
	for _, v := range vs {
		m := median(v.lat)
		b.ReportMetric(float64(m.Nanoseconds())/1e3, v.name+"-p50-µs")
		if v != vs[0] {
			b.ReportMetric(float64(m)/float64(base), v.name+"/tx")
		}
	}
}
