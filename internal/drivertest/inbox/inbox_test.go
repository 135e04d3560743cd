package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/configtest"
)

func TestOutcomeString(t *testing.T) {
	for o, want := range map[inbox.Outcome]string{inbox.Processed: "processed", inbox.Duplicate: "duplicate", 0: "Outcome(0)", 9: "Outcome(9)"} {
		if got := o.String(); got != want {
			t.Errorf("Outcome(%d).String() = %q, want %q", o, got, want)
		}
	}
}

func TestNewValidates(t *testing.T) {
	db, err := sql.Open("sqlite", sqliteDSN(t.TempDir()+"/x.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		name, field string
		db          *sql.DB
		cfg         *inbox.Config
	}{
		{"nil db", "db", nil, &inbox.Config{Dialect: inbox.SQLite}},
		{"nil config", "Config.Dialect", db, nil},
		{"no dialect", "Config.Dialect", db, &inbox.Config{}},
		{"unknown dialect", "Config.Dialect", db, &inbox.Config{Dialect: 42}},
		{"injection", "Config.Table", db, &inbox.Config{Dialect: inbox.Postgres, Table: "t; DROP TABLE x"}},
		{"qualified on sqlite", "Config.Table", db, &inbox.Config{Dialect: inbox.SQLite, Table: "main.t"}},
		{"two dots", "Config.Table", db, &inbox.Config{Dialect: inbox.Postgres, Table: "a.b.c"}},
		{"long name", "Config.Table", db, &inbox.Config{Dialect: inbox.MySQL, Table: strings.Repeat("t", 49)}},
		{"negative retention", "Config.Retention", db, &inbox.Config{Dialect: inbox.SQLite, Retention: -time.Second}},
		{"bloom one generation", "Config.Bloom.Generations", db, &inbox.Config{Dialect: inbox.SQLite, Bloom: &inbox.BloomConfig{Generations: 1}}},
		{"bloom fp rate", "Config.Bloom.FalsePositiveRate", db, &inbox.Config{Dialect: inbox.SQLite, Bloom: &inbox.BloomConfig{FalsePositiveRate: 0.9}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := inbox.New(c.db, c.cfg)
			configtest.Want(t, err, "inbox", c.field)
		})
	}
	if _, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: "app.inbox"}); err != nil {
		t.Errorf("schema-qualified table on PostgreSQL: %v", err)
	}
}

func TestInvalidIDs(t *testing.T) {
	f := newFixture(t, backends()[2], nil)
	ctx := ctxT(t)
	h := f.effect("x")
	for _, c := range []struct{ consumer, id string }{
		{"", "m1"},
		{"c", ""},
		{strings.Repeat("c", 256), "m1"},
		{"c\x00", "m1"},
		{"\xff", "m1"},
	} {
		out, err := f.ib.Process(ctx, c.consumer, c.id, h)
		if !errors.Is(err, inbox.ErrInvalidID) || out != 0 {
			t.Errorf("Process(%q, %q) = %v, %v; want 0, ErrInvalidID", c.consumer, c.id, out, err)
		}
	}
	if _, err := f.ib.Process(ctx, "c", "m", nil); err == nil {
		t.Error("nil handler accepted")
	}
	if n := f.totalEffects(t); n != 0 {
		t.Errorf("%d effects after invalid input", n)
	}
}

func TestStoredMessageID(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, c := range []struct {
		in     string
		hashed bool
	}{
		{"m1", false},
		{strings.Repeat("x", 255), false},
		{long, true},
		{"a\x00b", true},
		{"\xff\xfe", true},
	} {
		got := inbox.StoredMessageID(c.in)
		if hashed := strings.HasPrefix(got, "sha256:") && got != c.in; hashed != c.hashed {
			t.Errorf("StoredMessageID(%q) = %q, hashed %v, want %v", c.in, got, hashed, c.hashed)
		}
		if len(got) > inbox.MaxIDBytes {
			t.Errorf("StoredMessageID(%q) is %d bytes", c.in, len(got))
		}
	}
	if inbox.StoredMessageID(long) == inbox.StoredMessageID(long+"y") {
		t.Error("two long IDs share a stored form")
	}
}

func TestProcessOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		ctx := ctxT(t)
		long1 := strings.Repeat("L", 300) + "1"
		long2 := strings.Repeat("L", 300) + "2"
		for _, id := range []string{"m1", long1, long2, "bin\x00\xff"} {
			for i, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate, inbox.Duplicate} {
				out, err := f.ib.Process(ctx, "billing", id, f.effect(id))
				if err != nil || out != want {
					t.Fatalf("delivery %d of %.10q: %v, %v; want %v", i+1, id, out, err, want)
				}
			}
			if n := f.effectsOf(t, id); n != 1 {
				t.Fatalf("%.10q: %d effects, want 1", id, n)
			}
		}
		// Consumers are independent: the same message ID is new to another consumer.
		if out, err := f.ib.Process(ctx, "shipping", "m1", f.effect("m1")); err != nil || out != inbox.Processed {
			t.Fatalf("other consumer: %v, %v", out, err)
		}
		if s := f.ib.Stats(); s.Processed != 5 || s.Duplicates != 8 {
			t.Errorf("stats %+v, want 5 processed, 8 duplicates", s)
		}
	})
}

func TestConcurrentDuplicates(t *testing.T) {
	for _, withBloom := range []bool{false, true} {
		t.Run(fmt.Sprintf("bloom=%v", withBloom), func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				var cfg inbox.Config
				if withBloom {
					cfg.Bloom = &inbox.BloomConfig{Capacity: 1000}
				}
				f := newFixture(t, b, &cfg)
				ctx := ctxT(t)
				const n = 100
				var processed, duplicates atomic.Int32
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make(chan error, n)
				for range n {
					wg.Go(func() {
						<-start
						out, err := f.ib.Process(ctx, "c", "same", f.effect("same"))
						switch {
						case err != nil:
							errs <- err
						case out == inbox.Processed:
							processed.Add(1)
						case out == inbox.Duplicate:
							duplicates.Add(1)
						}
					})
				}
				close(start)
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				if processed.Load() != 1 || duplicates.Load() != n-1 {
					t.Errorf("processed %d, duplicates %d; want 1 and %d", processed.Load(), duplicates.Load(), n-1)
				}
				if e := f.effectsOf(t, "same"); e != 1 {
					t.Errorf("%d effects, want exactly 1", e)
				}
			})
		})
	}
}

var errBusiness = errors.New("business rule failed")

func TestHandlerFailureRollsBackDedupRow(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		ctx := ctxT(t)
		failing := func(ctx context.Context, tx *sql.Tx) error {
			if err := f.effect("m")(ctx, tx); err != nil {
				return err
			}
			return errBusiness // after writing: the write must roll back too
		}
		out, err := f.ib.Process(ctx, "c", "m", failing)
		if out != 0 || !errors.Is(err, errBusiness) || !errors.Is(err, inbox.ErrHandler) {
			t.Fatalf("failing handler: %v, %v; want 0 and an error wrapping errBusiness and ErrHandler", out, err)
		}
		if n := f.dedupRows(t); n != 0 {
			t.Fatalf("%d dedup rows after a failed handler, want 0", n)
		}
		if n := f.effectsOf(t, "m"); n != 0 {
			t.Fatalf("%d effects after a failed handler", n)
		}
		// The redelivery runs normally, once.
		for _, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate} {
			if out, err := f.ib.Process(ctx, "c", "m", f.effect("m")); err != nil || out != want {
				t.Fatalf("redelivery: %v, %v; want %v", out, err, want)
			}
		}
		if n := f.effectsOf(t, "m"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

func TestHandlerPanicRollsBack(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		f.db.SetMaxOpenConns(1) // a leaked transaction would hold the only connection
		ctx := ctxT(t)
		func() {
			defer func() {
				if recover() == nil {
					t.Fatal("panic did not propagate")
				}
			}()
			_, _ = f.ib.Process(ctx, "c", "m", func(ctx context.Context, tx *sql.Tx) error {
				if err := f.effect("m")(ctx, tx); err != nil {
					return err
				}
				panic("boom")
			})
		}()
		if out, err := f.ib.Process(ctx, "c", "m", f.effect("m")); err != nil || out != inbox.Processed {
			t.Fatalf("redelivery after panic: %v, %v", out, err)
		}
		if n := f.effectsOf(t, "m"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// waitForLockWait polls the server until a statement on table is waiting for
// a row lock: proof that the second delivery is blocked by the first's
// uncommitted dedup row. SQLite has no row locks (one writer): its second
// delivery waits in BEGIN IMMEDIATE, which the outcome checks cover.
func waitForLockWait(t *testing.T, f *fixture, done <-chan struct{}) {
	t.Helper()
	var q string
	switch f.dialect {
	case inbox.Postgres:
		q = `SELECT COUNT(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO ` + f.table + ` %'`
	case inbox.MySQL:
		// INNODB_TRX is a cache that may lag; the process list is live.
		q = `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'INSERT IGNORE INTO ` + f.table + ` %'`
	default:
		return
	}
	admin := f.db
	for {
		select {
		case <-done:
			t.Fatal("second delivery returned while the first was still uncommitted")
		default:
		}
		var n int
		if err := admin.QueryRowContext(ctxT(t), q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConcurrentRedeliveryWhileUncommitted(t *testing.T) {
	for _, firstCommits := range []bool{true, false} {
		name := "first rolls back"
		if firstCommits {
			name = "first commits"
		}
		t.Run(name, func(t *testing.T) {
			forEachBackend(t, func(t *testing.T, b backend) {
				f := newFixture(t, b, nil)
				ctx := ctxT(t)
				inHandler, release := make(chan struct{}), make(chan struct{})
				type result struct {
					out inbox.Outcome
					err error
				}
				first, second := make(chan result, 1), make(chan result, 1)
				go func() {
					out, err := f.ib.Process(ctx, "c", "m", func(ctx context.Context, tx *sql.Tx) error {
						if err := f.effect("m")(ctx, tx); err != nil {
							return err
						}
						close(inHandler)
						<-release
						if !firstCommits {
							return errBusiness
						}
						return nil
					})
					first <- result{out, err}
				}()
				<-inHandler
				secondDone := make(chan struct{})
				go func() {
					out, err := f.ib.Process(ctx, "c", "m", f.effect("m"))
					second <- result{out, err}
					close(secondDone)
				}()
				waitForLockWait(t, f, secondDone)
				close(release)
				r1, r2 := <-first, <-second
				if firstCommits {
					if r1.err != nil || r1.out != inbox.Processed || r2.err != nil || r2.out != inbox.Duplicate {
						t.Fatalf("first %v/%v, second %v/%v; want processed, duplicate", r1.out, r1.err, r2.out, r2.err)
					}
				} else {
					if !errors.Is(r1.err, errBusiness) || r2.err != nil || r2.out != inbox.Processed {
						t.Fatalf("first %v/%v, second %v/%v; want errBusiness, processed", r1.out, r1.err, r2.out, r2.err)
					}
				}
				if n := f.effectsOf(t, "m"); n != 1 {
					t.Fatalf("%d effects, want 1", n)
				}
			})
		})
	}
}

func TestProcessTxJoinsCallersTransaction(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		ctx := ctxT(t)
		outbox := f.table + "_outbox"
		if _, err := f.db.ExecContext(ctx, `CREATE TABLE `+outbox+` (message_id VARCHAR(255) NOT NULL)`); err != nil {
			t.Fatal(err)
		}
		deliver := func(id string, commit bool) inbox.Outcome {
			tx, err := f.db.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			out, err := f.ib.ProcessTx(ctx, tx, "c", id, f.effect(id))
			if err != nil {
				t.Fatal(err)
			}
			if out == inbox.Processed { // the caller writes its outbox in the same tx
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+outbox+` (message_id) VALUES (`+f.ph(1)+`)`, id); err != nil {
					t.Fatal(err)
				}
			}
			if commit {
				err = tx.Commit()
			} else {
				err = tx.Rollback()
			}
			if err != nil {
				t.Fatalf("ProcessTx must leave the tx open: %v", err)
			}
			return out
		}
		if out := deliver("m1", false); out != inbox.Processed {
			t.Fatalf("first: %v", out)
		}
		// Rolled back: nothing of it remains, the redelivery runs again.
		if out := deliver("m1", true); out != inbox.Processed {
			t.Fatalf("after rollback: %v", out)
		}
		if out := deliver("m1", true); out != inbox.Duplicate {
			t.Fatalf("after commit: %v", out)
		}
		if e, o := f.effectsOf(t, "m1"), f.count(t, `SELECT COUNT(*) FROM `+outbox); e != 1 || o != 1 {
			t.Fatalf("effects %d, outbox %d; want 1, 1", e, o)
		}
		// Handler error: returned; the caller rolls back.
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.ib.ProcessTx(ctx, tx, "c", "m2", func(context.Context, *sql.Tx) error { return errBusiness }); !errors.Is(err, errBusiness) {
			t.Fatalf("err %v", err)
		}
		if err := tx.Rollback(); err != nil {
			t.Fatal(err)
		}
		if out := deliver("m2", true); out != inbox.Processed {
			t.Fatalf("m2 redelivery: %v", out)
		}
	})
}

// TestSameMessageTwiceInBatch: brokers hand out batches, and a batch can hold
// the same message twice (a redelivery queued behind the original).
func TestSameMessageTwiceInBatch(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		ctx := ctxT(t)
		batch := []string{"a", "b", "a", "c", "b", "a"}
		// One Process per message.
		var got []inbox.Outcome
		for _, id := range batch {
			out, err := f.ib.Process(ctx, "c1", id, f.effect(id))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out)
		}
		want := []inbox.Outcome{inbox.Processed, inbox.Processed, inbox.Duplicate, inbox.Processed, inbox.Duplicate, inbox.Duplicate}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("outcomes %v, want %v", got, want)
		}
		// The whole batch in one transaction: the transaction sees its own row.
		tx, err := f.db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, id := range batch {
			out, err := f.ib.ProcessTx(ctx, tx, "c2", id, f.effect(id))
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, out)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("in one tx: outcomes %v, want %v", got, want)
		}
		for _, id := range []string{"a", "b", "c"} {
			if n := f.effectsOf(t, id); n != 2 { // once per consumer
				t.Errorf("%s: %d effects, want 2", id, n)
			}
		}
	})
}

func TestMigrateConcurrentAndRepeatable(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		db := b.open(t)
		ctx := ctxT(t)
		ib, err := inbox.New(db, &inbox.Config{Dialect: b.dialect, Table: "inbox_mig"})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 6 {
			wg.Go(func() { errs <- ib.Migrate(ctx) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		if err := ib.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		var n int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM inbox_mig_migrations`).Scan(&n); err != nil || n != 1 {
			t.Fatalf("migrations recorded: %d, %v; want 1", n, err)
		}
		if out, err := ib.Process(ctx, "c", "m", func(context.Context, *sql.Tx) error { return nil }); err != nil || out != inbox.Processed {
			t.Fatalf("after migrate: %v, %v", out, err)
		}
	})
}

// TestExactlyOnceCounter is a chaos run: deliveries with 30% duplicates,
// shuffled, consumed by concurrent workers whose handler randomly fails
// (before or after writing) and is then redelivered, like a broker would. The
// effect count must equal the number of unique messages, and no message may
// have two effects.
func TestExactlyOnceCounter(t *testing.T) {
	sizes := map[inbox.Dialect]int{inbox.Postgres: 10_000, inbox.MySQL: 3_000, inbox.SQLite: 1_000} // modernc SQLite is transpiled C: -race makes it ~20x slower
	forEachBackend(t, func(t *testing.T, b backend) {
		f := newFixture(t, b, nil)
		// A hang guard only: ctxT's two minutes are not enough for 14,000
		// transactions on PostgreSQL at load 40 (every Begin then failed
		// with the deadline), and nothing here is timed.
		ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
		t.Cleanup(cancel)
		total := sizes[b.dialect]
		unique := total * 7 / 10
		deliveries := make([]string, 0, total)
		for i := range unique {
			deliveries = append(deliveries, fmt.Sprintf("msg-%d", i))
		}
		for len(deliveries) < total {
			deliveries = append(deliveries, fmt.Sprintf("msg-%d", rand.IntN(unique)))
		}
		rand.Shuffle(len(deliveries), func(i, j int) { deliveries[i], deliveries[j] = deliveries[j], deliveries[i] })

		queue := make(chan string, total) // redeliveries never exceed the capacity
		for _, d := range deliveries {
			queue <- d
		}
		var remaining atomic.Int64
		remaining.Store(int64(total))
		var failures, retryable, processed atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for id := range queue {
					out, err := f.ib.Process(ctx, "counter", id, func(ctx context.Context, tx *sql.Tx) error {
						r := rand.IntN(100)
						if r < 5 {
							return errBusiness // fails before writing
						}
						if err := f.effect(id)(ctx, tx); err != nil {
							return err
						}
						if r < 12 {
							return errBusiness // fails after writing
						}
						return nil
					})
					switch {
					case errors.Is(err, errBusiness):
						failures.Add(1)
						queue <- id // the broker redelivers
						continue
					case inbox.IsRetryable(err):
						retryable.Add(1)
						queue <- id
						continue
					case err != nil:
						t.Errorf("%s: %v", id, err)
					case out == inbox.Processed:
						processed.Add(1)
					}
					if remaining.Add(-1) == 0 {
						close(queue)
					}
				}
			})
		}
		wg.Wait()
		if got := f.totalEffects(t); got != unique || processed.Load() != int64(unique) {
			t.Fatalf("effects %d, Processed outcomes %d; want %d (unique messages)", got, processed.Load(), unique)
		}
		if n := f.count(t, `SELECT COUNT(*) FROM (SELECT message_id FROM `+f.effects()+` GROUP BY message_id HAVING COUNT(*) > 1) d`); n != 0 {
			t.Fatalf("%d messages have more than one effect", n)
		}
		t.Logf("%d deliveries, %d unique, %d handler failures redelivered, %d retryable errors, stats %+v",
			total, unique, failures.Load(), retryable.Load(), f.ib.Stats())
	})
}
