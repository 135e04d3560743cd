package watermark_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/watermark"
	"github.com/idemkit/idem/internal/testenv"
)

// TestStrictParksEarlyEvent: in Strict mode v2 of an account is delivered
// before v1. Process parks it (rolls back, waits, runs it again) instead of
// failing it; v1 arrives meanwhile and v2 then applies, in the same Process
// call. The parking is counted. An event whose predecessor never comes is
// returned after the bounded retries as ErrGap (which is inbox.ErrNotYet:
// not poison), with its dedup row rolled back, so a later redelivery applies
// it.
func TestStrictParksEarlyEvent(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, wm, table := setup(t, b, watermark.Strict)
			ib, err := inbox.New(db, &inbox.Config{Dialect: b.dialect, Table: testenv.Name("inbox"), EarlyBackoff: 20 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if err := ib.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			apply := func(v int64) inbox.Handler {
				return func(ctx context.Context, tx *sql.Tx) error {
					_, err := wm.Upsert(ctx, tx, "acc-1", v, map[string]any{"balance": v * 10})
					return err
				}
			}
			type result struct {
				out inbox.Outcome
				err error
			}
			early := make(chan result, 1)
			go func() {
				out, err := ib.Process(ctx, "ledger", "evt-v2", apply(2))
				early <- result{out, err}
			}()
			// v1 is delivered once v2 has been parked at least once.
			for ib.Stats().EarlyRetries == 0 {
				if ctx.Err() != nil {
					t.Fatal("v2 was never parked")
				}
				time.Sleep(time.Millisecond)
			}
			if out, err := ib.Process(ctx, "ledger", "evt-v1", apply(1)); err != nil || out != inbox.Processed {
				t.Fatalf("v1: %v, %v", out, err)
			}
			if r := <-early; r.err != nil || r.out != inbox.Processed {
				t.Fatalf("parked v2: %v, %v; want processed once v1 arrived", r.out, r.err)
			}
			if v, _, _, err := wm.State(ctx, db, "acc-1"); err != nil || v != 2 {
				t.Fatalf("row at v%d (%v), want v2", v, err)
			}

			// v4 with v3 missing: parked EarlyRetries times, then returned.
			before := ib.Stats().EarlyRetries
			out, err := ib.Process(ctx, "ledger", "evt-v4", apply(4))
			if out != 0 || !errors.Is(err, watermark.ErrGap) || !errors.Is(err, inbox.ErrNotYet) || !errors.Is(err, inbox.ErrHandler) {
				t.Fatalf("v4 without v3: %v, %v; want ErrGap (ErrNotYet)", out, err)
			}
			if n := ib.Stats().EarlyRetries - before; n != 4 {
				t.Fatalf("v4 parked %d times, want the default 4", n)
			}
			var rows int
			if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+ib.Table()+` WHERE message_id = `+b.dialect.Placeholder(1), "evt-v4").Scan(&rows); err != nil || rows != 0 {
				t.Fatalf("dedup row of the gap event kept: %d, %v", rows, err)
			}
			// The redelivery after v3 applies it.
			for _, e := range []struct {
				id string
				v  int64
			}{{"evt-v3", 3}, {"evt-v4", 4}} {
				if out, err := ib.Process(ctx, "ledger", e.id, apply(e.v)); err != nil || out != inbox.Processed {
					t.Fatalf("%s: %v, %v", e.id, out, err)
				}
			}
			if v, bal, _ := b.state(t, db, wm, table); v != 4 || bal != 40 {
				t.Fatalf("final v%d balance %d, want v4, 40", v, bal)
			}
		})
	}
}
