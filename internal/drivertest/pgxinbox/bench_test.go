package pgxinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/pgxinbox"
	"github.com/idemkit/idem/internal/testenv"
)

// Reproduce (PostgreSQL on loopback):
//
//	go test -run '^$' -bench 'Batch' -benchtime 1000x -count 5 ./internal/drivertest/pgxinbox
//
// Every benchmark interleaves its variants op by op (A, B, C, A, B, C, …)
// and reports each variant's median latency (…-p50-µs) and its ratio to the
// first, so that the load of a shared machine hits them alike. The /par8
// runs do the same from 8 goroutines at once (each op acquires its own
// connection from a pool of 16).
//
// Variants, for the same business statements:
//   - tx: the business transaction alone, written the ordinary pgx way:
//     pool.Begin, one Exec per statement, Commit.
//   - txbatch: the business transaction alone in the fewest round trips:
//     one batch (BEGIN and the statements), then COMMIT.
//   - batch: pgxinbox.ProcessBatch, a new message ID: one batch (BEGIN, the
//     dedup claim, the statements), then COMMIT.
//   - sql: inbox.Process through database/sql on the same pool: BEGIN, the
//     dedup INSERT, each statement, COMMIT.

type benchVariant struct {
	name string
	op   func(ctx context.Context, id string) error
}

type benchFixture struct {
	pool *pgxpool.Pool
	ib   *inbox.Inbox
}

func newBenchFixture(b *testing.B, ddl ...string) *benchFixture {
	b.Helper()
	_, dsn := testenv.PostgresDB(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	b.Cleanup(func() { db.Close() })
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: testenv.Name("inbox")})
	if err != nil {
		b.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		b.Fatal(err)
	}
	for _, q := range ddl {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return &benchFixture{pool: pool, ib: ib}
}

// variants builds the four variants around stmts(id, i), the business
// statements of op i.
func (f *benchFixture) variants(stmts func(id string, i int) []pgx.QueuedQuery) []benchVariant {
	i := 0
	var mu sync.Mutex
	next := func() int { mu.Lock(); defer mu.Unlock(); i++; return i }
	return []benchVariant{
		{name: "tx", op: func(ctx context.Context, id string) error {
			tx, err := f.pool.Begin(ctx)
			if err != nil {
				return err
			}
			for _, q := range stmts(id, next()) {
				if _, err := tx.Exec(ctx, q.SQL, q.Arguments...); err != nil {
					return errors.Join(err, tx.Rollback(ctx))
				}
			}
			return tx.Commit(ctx)
		}},
		{name: "txbatch", op: func(ctx context.Context, id string) error {
			return f.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
				b := &pgx.Batch{}
				b.Queue("BEGIN")
				for _, q := range stmts(id, next()) {
					b.Queue(q.SQL, q.Arguments...)
				}
				if err := c.SendBatch(ctx, b).Close(); err != nil {
					_, rerr := c.Exec(ctx, "ROLLBACK")
					return errors.Join(err, rerr)
				}
				_, err := c.Exec(ctx, "COMMIT")
				return err
			})
		}},
		{name: "batch", op: func(ctx context.Context, id string) error {
			return f.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
				out, err := pgxinbox.ProcessBatch(ctx, f.ib, c.Conn(), "bench", id, func(b *pgx.Batch) error {
					for _, q := range stmts(id, next()) {
						b.Queue(q.SQL, q.Arguments...)
					}
					return nil
				})
				if err == nil && out != inbox.Processed {
					err = fmt.Errorf("outcome %v", out)
				}
				return err
			})
		}},
		{name: "sql", op: func(ctx context.Context, id string) error {
			return f.inboxSQL(ctx, id, stmts(id, next()))
		}},
	}
}

// inboxSQL runs qs through inbox.Process (database/sql).
func (f *benchFixture) inboxSQL(ctx context.Context, id string, qs []pgx.QueuedQuery) error {
	out, err := f.ib.Process(ctx, "bench-sql", id, func(ctx context.Context, tx *sql.Tx) error {
		for _, q := range qs {
			if _, err := tx.ExecContext(ctx, q.SQL, q.Arguments...); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil && out != inbox.Processed {
		err = fmt.Errorf("outcome %v", out)
	}
	return err
}

// runBatchBench runs the variants interleaved, from par goroutines, and
// reports medians and ratios to the first variant.
func runBatchBench(b *testing.B, vs []benchVariant, par int) {
	ctx := context.Background()
	lat := make([][]time.Duration, len(vs))
	var mu sync.Mutex
	per := max(b.N/par, 1)
	run := time.Now().UnixNano() // -count repeats a sub-benchmark on the same tables
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, par)
	for g := range par {
		wg.Go(func() {
			mine := make([][]time.Duration, len(vs))
			for i := range per {
				for j := range vs {
					// Rotate the order so that no variant always runs first.
					k := (j + i) % len(vs)
					v := vs[k]
					id := fmt.Sprint(v.name, "-", run, "-", g, "-", i)
					t0 := time.Now()
					if err := v.op(ctx, id); err != nil {
						errs <- fmt.Errorf("%s: %w", v.name, err)
						return
					}
					mine[k] = append(mine[k], time.Since(t0))
				}
			}
			mu.Lock()
			for k := range mine {
				lat[k] = append(lat[k], mine[k]...)
			}
			mu.Unlock()
		})
	}
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	base := p50(lat[0])
	for k, v := range vs {
		m := p50(lat[k])
		b.ReportMetric(float64(m.Nanoseconds())/1e3, v.name+"-p50-µs")
		if k > 0 {
			b.ReportMetric(float64(m)/float64(base), v.name+"/"+vs[0].name)
		}
	}
	if len(vs) > 2 {
		// The dedup row's own cost: batch against the same round trips.
		b.ReportMetric(float64(p50(lat[2]))/float64(p50(lat[1])), vs[2].name+"/"+vs[1].name)
	}
}

func p50(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkBatchBusinessTx: one business INSERT.
func BenchmarkBatchBusinessTx(b *testing.B) {
	f := newBenchFixture(b, "CREATE TABLE bench_effects (id bigserial PRIMARY KEY, message text NOT NULL)")
	vs := f.variants(func(id string, _ int) []pgx.QueuedQuery {
		return []pgx.QueuedQuery{{SQL: "INSERT INTO bench_effects (message) VALUES ($1)", Arguments: []any{id}}}
	})
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprint("par", par), func(b *testing.B) { runBatchBench(b, vs, par) })
	}
}

// BenchmarkBatchPaymentTx: debit an account, append a ledger row, write an
// outbox event.
func BenchmarkBatchPaymentTx(b *testing.B) {
	f := newBenchFixture(b,
		"CREATE TABLE bench_accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)",
		"CREATE TABLE bench_ledger (id bigserial PRIMARY KEY, message text NOT NULL, amount bigint NOT NULL)",
		"CREATE TABLE bench_outbox (id bigserial PRIMARY KEY, payload text NOT NULL)",
		"INSERT INTO bench_accounts SELECT g, 1000000000 FROM generate_series(1, 64) g")
	vs := f.variants(func(id string, i int) []pgx.QueuedQuery {
		return []pgx.QueuedQuery{
			{SQL: "UPDATE bench_accounts SET balance = balance - $1 WHERE id = $2", Arguments: []any{100, i%64 + 1}},
			{SQL: "INSERT INTO bench_ledger (message, amount) VALUES ($1, $2)", Arguments: []any{id, -100}},
			{SQL: "INSERT INTO bench_outbox (payload) VALUES ($1)", Arguments: []any{`{"event":"debited","message":"` + id + `"}`}},
		}
	})
	for _, par := range []int{1, 8} {
		b.Run(fmt.Sprint("par", par), func(b *testing.B) { runBatchBench(b, vs, par) })
	}
}
