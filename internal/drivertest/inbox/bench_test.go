package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/redis/redisinbox"
)

// Reproduce (PostgreSQL and Redis on loopback):
//
//	go test -run '^$' -bench . -benchtime 1000x -count 5 ./internal/drivertest/inbox
//
// The machine these run on is shared, so every benchmark interleaves its
// variants in the same loop (A, B, A, B, …) and reports each variant's
// median per-op latency as a custom metric (…-p50-µs): load drift then hits
// all variants alike and the ratios stay meaningful.

func benchInbox(b *testing.B, db *fixture, fast, bloom bool) *inbox.Inbox {
	b.Helper()
	cfg := inbox.Config{Dialect: inbox.Postgres, Table: testenv.Name("inbox")}
	if fast {
		r := testenv.UseRedis(b)
		rdb := redis.NewClient(&redis.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB})
		b.Cleanup(func() { rdb.Close() })
		fp, err := redisinbox.New(rdb, &redisinbox.Config{Prefix: r.Prefix})
		if err != nil {
			b.Fatal(err)
		}
		cfg.FastPath = fp
	}
	if bloom {
		cfg.Bloom = &inbox.BloomConfig{Capacity: 1 << 20}
	}
	ib, err := inbox.New(db.db, &cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := ib.Migrate(context.Background()); err != nil {
		b.Fatal(err)
	}
	return ib
}

type variant struct {
	name string
	op   func(i int) error
	lat  []time.Duration
}

func runInterleaved(b *testing.B, vs []*variant) {
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
	base := median(vs[0].lat)
	for _, v := range vs {
		m := median(v.lat)
		b.ReportMetric(float64(m.Nanoseconds())/1e3, v.name+"-p50-µs")
		if v != vs[0] {
			b.ReportMetric(float64(m)/float64(base), v.name+"/"+vs[0].name)
		}
	}
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkBusinessTx: the cost of the dedup row. "tx" is one business
// INSERT in its own transaction; "inbox" is the same INSERT through Process
// with a new message ID (BEGIN, dedup INSERT, business INSERT, COMMIT).
func BenchmarkBusinessTx(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b, backends()[0], nil)
	bloomIb := benchInbox(b, f, false, true)
	redisIb := benchInbox(b, f, true, false)
	process := func(ib *inbox.Inbox, prefix string) func(int) error {
		return func(i int) error {
			id := fmt.Sprint(prefix, b.N, "-", i)
			_, err := ib.Process(ctx, "bench", id, f.effect(id))
			return err
		}
	}
	runInterleaved(b, []*variant{
		{name: "tx", op: func(i int) error {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := f.effect(fmt.Sprint("raw", i))(ctx, tx); err != nil {
				return err
			}
			return tx.Commit()
		}},
		{name: "inbox", op: process(f.ib, "a")},
		{name: "inbox+bloom", op: process(bloomIb, "b")},
		{name: "inbox+redis", op: process(redisIb, "c")},
	})
}

// BenchmarkDuplicate: absorbing a redelivery of an already-processed message,
// per layer: the database alone (BEGIN, INSERT … DO NOTHING, ROLLBACK), the
// Bloom prefilter with its one-read probe, the Redis fast path, both.
func BenchmarkDuplicate(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b, backends()[0], nil)
	const seeded = 500
	var vs []*variant
	for _, l := range []struct {
		name        string
		fast, bloom bool
	}{{"db", false, false}, {"db+bloom", false, true}, {"db+redis", true, false}, {"db+redis+bloom", true, true}} {
		ib := benchInbox(b, f, l.fast, l.bloom)
		for i := range seeded {
			if _, err := ib.Process(ctx, "bench", fmt.Sprint("m", i), f.effect("x")); err != nil {
				b.Fatal(err)
			}
		}
		vs = append(vs, &variant{name: l.name, op: func(i int) error {
			out, err := ib.Process(ctx, "bench", fmt.Sprint("m", i%seeded), f.effect("x"))
			if err == nil && out != inbox.Duplicate {
				err = fmt.Errorf("outcome %v", out)
			}
			return err
		}})
	}
	runInterleaved(b, vs)
}

// BenchmarkRoundTrip: the floor, one PostgreSQL and one Redis round trip.
func BenchmarkRoundTrip(b *testing.B) {
	ctx := context.Background()
	db, _ := testenv.PostgresDB(b)
	r := testenv.UseRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB})
	b.Cleanup(func() { rdb.Close() })
	var one int
	runInterleaved(b, []*variant{
		{name: "pg-select1", op: func(int) error { return db.QueryRowContext(ctx, `SELECT 1`).Scan(&one) }},
		{name: "redis-ping", op: func(int) error { return rdb.Ping(ctx).Err() }},
	})
}

// BenchmarkPaymentTx: the cost of the dedup row for a typical consumer, whose
// business transaction moves money: debit an account, append a ledger row,
// write an outbox event (three statements). "tx" runs them in a transaction
// of their own; "inbox" runs the same handler through Process.
func BenchmarkPaymentTx(b *testing.B) {
	ctx := context.Background()
	f := newFixture(b, backends()[0], nil)
	for _, ddl := range []string{
		"CREATE TABLE bench_accounts (id bigint PRIMARY KEY, balance bigint NOT NULL)",
		"CREATE TABLE bench_ledger (id bigserial PRIMARY KEY, message text NOT NULL, amount bigint NOT NULL)",
		"CREATE TABLE bench_outbox (id bigserial PRIMARY KEY, payload text NOT NULL)",
		"INSERT INTO bench_accounts SELECT g, 1000000000 FROM generate_series(1, 64) g",
	} {
		if _, err := f.db.ExecContext(ctx, ddl); err != nil {
			b.Fatal(err)
		}
	}
	pay := func(msg string, i int) inbox.Handler {
		return func(ctx context.Context, tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, "UPDATE bench_accounts SET balance = balance - $1 WHERE id = $2", 100, i%64+1); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, "INSERT INTO bench_ledger (message, amount) VALUES ($1, $2)", msg, -100); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO bench_outbox (payload) VALUES ($1)", `{"event":"debited","message":"`+msg+`"}`)
			return err
		}
	}
	runInterleaved(b, []*variant{
		{name: "tx", op: func(i int) error {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			if err := pay(fmt.Sprint("raw-", b.N, "-", i), i)(ctx, tx); err != nil {
				return errors.Join(err, tx.Rollback())
			}
			return tx.Commit()
		}},
		{name: "inbox", op: func(i int) error {
			id := fmt.Sprint("pay-", b.N, "-", i)
			_, err := f.ib.Process(ctx, "bench", id, pay(id, i))
			return err
		}},
	})
}
