package pgxinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/pgxinbox"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/testenv"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fixture struct {
	pool  *pgxpool.Pool
	ib    *inbox.Inbox
	table string
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// setup opens a pgx pool on a fresh schema, an inbox over the same pool
// (through stdlib.OpenDBFromPool) and an effects table.
func setup(t *testing.T) *fixture {
	t.Helper()
	_, dsn := testenv.PostgresDB(t)
	ctx := ctxT(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })
	table := testenv.Name("inbox")
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+`_effects (message_id text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return &fixture{pool: pool, ib: ib, table: table}
}

func (f *fixture) effect(id string) pgxinbox.Handler {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, id)
		return err
	}
}

func (f *fixture) effects(t *testing.T, id string) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(ctxT(t), `SELECT COUNT(*) FROM `+f.table+`_effects WHERE message_id = $1`, id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// inTx runs fn in a pgx transaction of its own and commits unless fn fails.
func (f *fixture) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := f.pool.Begin(ctx)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		return errors.Join(err, tx.Rollback(ctx))
	}
	return tx.Commit(ctx)
}

func TestProcessTxOnce(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := ctxT(t)
	for i, want := range []inbox.Outcome{inbox.Processed, inbox.Duplicate, inbox.Duplicate} {
		err := f.inTx(ctx, func(tx pgx.Tx) error {
			out, err := pgxinbox.ProcessTx(ctx, f.ib, tx, "c", "m", f.effect("m"))
			if err != nil {
				return err
			}
			if out != want {
				t.Fatalf("delivery %d: %v, want %v", i, out, want)
			}
			// A duplicate leaves the caller's transaction usable.
			var one int
			return tx.QueryRow(ctx, `SELECT 1`).Scan(&one)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := f.effects(t, "m"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// database/sql and pgx deduplicate against each other.
	out, err := f.ib.Process(ctx, "c", "m", func(context.Context, *sql.Tx) error { t.Fatal("handler ran for a duplicate"); return nil })
	if err != nil || out != inbox.Duplicate {
		t.Fatalf("Process after pgx ProcessTx: %v, %v", out, err)
	}
}

// TestHandlerErrorRollsBack: the handler fails after writing; the caller
// rolls back; the redelivery runs again, once.
func TestHandlerErrorRollsBack(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := ctxT(t)
	boom := errors.New("boom")
	err := f.inTx(ctx, func(tx pgx.Tx) error {
		_, err := pgxinbox.ProcessTx(ctx, f.ib, tx, "c", "m", func(ctx context.Context, tx pgx.Tx) error {
			if err := f.effect("m")(ctx, tx); err != nil {
				return err
			}
			return boom
		})
		return err
	})
	if !errors.Is(err, boom) || !errors.Is(err, inbox.ErrHandler) {
		t.Fatalf("failing handler: %v", err)
	}
	if err := f.inTx(ctx, func(tx pgx.Tx) error {
		out, err := pgxinbox.ProcessTx(ctx, f.ib, tx, "c", "m", f.effect("m"))
		if err == nil && out != inbox.Processed {
			t.Fatalf("redelivery: %v", out)
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := f.effects(t, "m"); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
}

// TestConcurrentDeliveries: 30 deliveries of one message, each in its own
// pgx transaction, at once: one effect.
func TestConcurrentDeliveries(t *testing.T) {
	t.Parallel()
	f := setup(t)
	ctx := ctxT(t)
	var processed atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 30 {
		wg.Go(func() {
			<-start
			err := f.inTx(ctx, func(tx pgx.Tx) error {
				out, err := pgxinbox.ProcessTx(ctx, f.ib, tx, "c", "same", f.effect("same"))
				if out == inbox.Processed {
					processed.Add(1)
				}
				return err
			})
			if err != nil {
				t.Error(err)
			}
		})
	}
	close(start)
	wg.Wait()
	if n := f.effects(t, "same"); n != 1 || processed.Load() != 1 {
		t.Fatalf("%d effects, %d processed; want 1, 1", n, processed.Load())
	}
}

func TestProcessTxValidates(t *testing.T) {
	t.Parallel()
	db := stdlib.OpenDB(pgx.ConnConfig{})
	defer db.Close()
	lite, err := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, pgx.Tx) error { return nil }
	_, err = pgxinbox.ProcessTx(context.Background(), lite, nil, "c", "m", noop)
	configtest.Want(t, err, "pgxinbox", "ib") // an SQLite inbox
	_, err = pgxinbox.ProcessTx(context.Background(), nil, nil, "c", "m", noop)
	configtest.Want(t, err, "pgxinbox", "ib")
}
