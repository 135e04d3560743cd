package pgxinbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/pgxinbox"
	"github.com/idemkit/idem/internal/configtest"
)

// queueEffect queues the effects row and a nextval of a sequence: a
// sequence is not rolled back, so it counts every execution of the
// business statements, committed or not.
func (f *fixture) queueEffect(id string) pgxinbox.BatchHandler {
	return func(b *pgx.Batch) error {
		b.Queue(`SELECT nextval('` + f.table + `_runs')`)
		b.Queue(`INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, id)
		return nil
	}
}

func (f *fixture) runs(t *testing.T) int64 {
	t.Helper()
	var n int64
	if err := f.pool.QueryRow(ctxT(t), `SELECT last_value - CASE WHEN is_called THEN 0 ELSE 1 END FROM `+f.table+`_runs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func batchSetup(t *testing.T) *fixture {
	f := setup(t)
	if _, err := f.pool.Exec(ctxT(t), `CREATE SEQUENCE `+f.table+`_runs`); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) processBatch(ctx context.Context, id string, queue pgxinbox.BatchHandler) (out inbox.Outcome, err error) {
	aerr := f.pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		out, err = pgxinbox.ProcessBatch(ctx, f.ib, c.Conn(), "c", id, queue)
		if st := c.Conn().PgConn().TxStatus(); !c.Conn().IsClosed() && st != 'I' {
			return fmt.Errorf("connection left in transaction status %q", st)
		}
		return nil
	})
	return out, errors.Join(err, aerr)
}

// A new message commits its effect once; its redelivery is Duplicate and
// never executes the business statements (the sequence did not move).
func TestProcessBatchOnce(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	out, err := f.processBatch(ctx, "m1", f.queueEffect("m1"))
	if err != nil || out != inbox.Processed {
		t.Fatalf("first: %v, %v", out, err)
	}
	for range 3 {
		out, err = f.processBatch(ctx, "m1", f.queueEffect("m1"))
		if err != nil || out != inbox.Duplicate {
			t.Fatalf("redelivery: %v, %v", out, err)
		}
	}
	if n := f.effects(t, "m1"); n != 1 {
		t.Fatalf("effects = %d, want 1", n)
	}
	if n := f.runs(t); n != 1 {
		t.Fatalf("business statements ran %d times, want 1: a duplicate executed them", n)
	}
	if st := f.ib.Stats(); st.Processed != 1 || st.Duplicates != 3 {
		t.Fatalf("stats %+v", st)
	}
}

// The paths share rows: a message processed by Process is a Duplicate for
// ProcessBatch.
func TestProcessBatchSeesProcessRows(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	if err := f.inTx(ctx, func(tx pgx.Tx) error {
		_, err := pgxinbox.ProcessTx(ctx, f.ib, tx, "c", "m", f.effect("m"))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	out, err := f.processBatch(ctx, "m", f.queueEffect("m"))
	if err != nil || out != inbox.Duplicate {
		t.Fatalf("%v, %v", out, err)
	}
	if f.effects(t, "m") != 1 || f.runs(t) != 0 {
		t.Fatalf("effects %d, runs %d", f.effects(t, "m"), f.runs(t))
	}
}

// A failing business statement, a callback's error and queue's own error
// roll back the dedup row with the effect: the redelivery applies it.
func TestProcessBatchFailureRollsBack(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	veto := errors.New("insufficient funds")
	for name, q := range map[string]pgxinbox.BatchHandler{
		"statement": func(b *pgx.Batch) error {
			b.Queue(`INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, "x")
			b.Queue(`SELECT 1/0`)
			return nil
		},
		"callback": func(b *pgx.Batch) error {
			b.Queue(`INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, "x").Exec(func(pgconn.CommandTag) error { return veto })
			return nil
		},
		"queue": func(b *pgx.Batch) error {
			b.Queue(`INSERT INTO `+f.table+`_effects (message_id) VALUES ($1)`, "x")
			return veto
		},
		"prepare": func(b *pgx.Batch) error {
			b.Queue(`INSERT INTO no_such_table_` + f.table + ` VALUES (1)`)
			return nil
		},
	} {
		id := "fail-" + name
		out, err := f.processBatch(ctx, id, q)
		if err == nil || out != 0 || !errors.Is(err, inbox.ErrHandler) {
			t.Fatalf("%s: %v, %v; want a handler error", name, out, err)
		}
		if name != "statement" && name != "prepare" && !errors.Is(err, veto) {
			t.Fatalf("%s: %v does not wrap the cause", name, err)
		}
		if n := f.effects(t, "x"); n != 0 {
			t.Fatalf("%s: effects = %d after a failure", name, n)
		}
		out, err = f.processBatch(ctx, id, f.queueEffect(id))
		if err != nil || out != inbox.Processed {
			t.Fatalf("%s redelivery: %v, %v", name, out, err)
		}
	}
}

// A panic in queue or in a callback rolls back and propagates; the
// connection is not left in a transaction.
func TestProcessBatchPanic(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	for name, q := range map[string]pgxinbox.BatchHandler{
		"queue": func(b *pgx.Batch) error { panic("boom") },
		"callback": func(b *pgx.Batch) error {
			b.Queue(`SELECT 1`).Exec(func(pgconn.CommandTag) error { panic("boom") })
			return nil
		},
	} {
		conn, err := f.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		func() {
			defer func() {
				if recover() == nil {
					t.Fatalf("%s: no panic", name)
				}
			}()
			_, _ = pgxinbox.ProcessBatch(ctx, f.ib, conn.Conn(), "c", "p-"+name, q)
		}()
		if !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
			t.Fatalf("%s: connection left in a transaction", name)
		}
		conn.Release()
		out, err := f.processBatch(ctx, "p-"+name, f.queueEffect("p-"+name))
		if err != nil || out != inbox.Processed {
			t.Fatalf("%s redelivery: %v, %v", name, out, err)
		}
	}
}

// Concurrent deliveries of one message: exactly one Processed, the others
// Duplicate, one effect, and the business statements executed once.
func TestProcessBatchConcurrent(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	const workers, msgs = 8, 20
	var processed, dups atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers*msgs)
	for range workers {
		wg.Go(func() {
			for m := range msgs {
				id := fmt.Sprint("c-", m)
				out, err := f.processBatch(ctx, id, f.queueEffect(id))
				switch {
				case err != nil:
					errs <- err
				case out == inbox.Processed:
					processed.Add(1)
				case out == inbox.Duplicate:
					dups.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if processed.Load() != msgs || dups.Load() != (workers-1)*msgs {
		t.Fatalf("processed %d, duplicates %d", processed.Load(), dups.Load())
	}
	for m := range msgs {
		if n := f.effects(t, fmt.Sprint("c-", m)); n != 1 {
			t.Fatalf("c-%d: effects %d", m, n)
		}
	}
	if n := f.runs(t); n != msgs {
		t.Fatalf("business statements ran %d times, want %d", n, msgs)
	}
}

func TestProcessBatchValidates(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	conn, err := f.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	q := f.queueEffect("v")
	for field, call := range map[string]func() (inbox.Outcome, error){
		"ib":    func() (inbox.Outcome, error) { return pgxinbox.ProcessBatch(ctx, nil, conn.Conn(), "c", "v", q) },
		"conn":  func() (inbox.Outcome, error) { return pgxinbox.ProcessBatch(ctx, f.ib, nil, "c", "v", q) },
		"queue": func() (inbox.Outcome, error) { return pgxinbox.ProcessBatch(ctx, f.ib, conn.Conn(), "c", "v", nil) },
	} {
		_, err := call()
		configtest.Want(t, err, "pgxinbox", field)
	}
	if _, err := pgxinbox.ProcessBatch(ctx, f.ib, conn.Conn(), "c", "", q); !errors.Is(err, inbox.ErrInvalidID) {
		t.Errorf("empty id: %v, want ErrInvalidID", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = pgxinbox.ProcessBatch(ctx, f.ib, conn.Conn(), "c", "v", q)
	configtest.Want(t, err, "pgxinbox", "conn") // inside a transaction
	_ = tx.Rollback(ctx)
	if f.effects(t, "v") != 0 {
		t.Fatal("effect written")
	}
}

// ProcessEngine's own contract, with engines that do no database work:
// the claim it hands over, outcomes it refuses, and Process's retries.
func TestProcessEngineContract(t *testing.T) {
	t.Parallel()
	f := batchSetup(t)
	ctx := ctxT(t)
	_, err := f.ib.ProcessEngine(ctx, "c", "m", nil)
	configtest.Want(t, err, "inbox", "run")
	var got inbox.Claim
	out, err := f.ib.ProcessEngine(ctx, "c", "m", func(ctx context.Context, c inbox.Claim) (inbox.Outcome, error) {
		got = c
		return inbox.Duplicate, nil
	})
	if err != nil || out != inbox.Duplicate {
		t.Fatalf("%v, %v", out, err)
	}
	if len(got.Args) != 2 || got.Args[0] != "c" || got.Args[1] != "m" || got.SQL == "" {
		t.Fatalf("claim %+v", got)
	}
	if _, err := f.ib.ProcessEngine(ctx, "c", "m", func(context.Context, inbox.Claim) (inbox.Outcome, error) { return 0, nil }); err == nil {
		t.Fatal("outcome 0 without an error was accepted")
	}
	// A handler error wrapping ErrNotYet is run again (Config.EarlyRetries,
	// 4 by default), then returned; a database error is not a handler's.
	runs := 0
	_, err = f.ib.ProcessEngine(ctx, "c", "early", func(context.Context, inbox.Claim) (inbox.Outcome, error) {
		runs++
		return 0, fmt.Errorf("%w: %w", inbox.ErrHandler, inbox.ErrNotYet)
	})
	if !errors.Is(err, inbox.ErrNotYet) || runs != 5 {
		t.Fatalf("early: %d runs, %v", runs, err)
	}
	boom := errors.New("connection reset")
	_, err = f.ib.ProcessEngine(ctx, "c", "db", func(context.Context, inbox.Claim) (inbox.Outcome, error) { return 0, boom })
	if !errors.Is(err, boom) || errors.Is(err, inbox.ErrHandler) {
		t.Fatalf("database error: %v", err)
	}
}
