package sqlstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/sqlstore"
)

func TestStepConformance(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			idemtest.RunSteps(t, idemtest.Harness{
				New: func(t *testing.T) idem.Store {
					if b.dialect == sqlstore.SQLite {
						db, _ := b.open(t)
						return newStore(t, b, db)
					}
					return newStore(t, b, db)
				},
			})
		})
	}
}

// TestSaveStepTx: a local step's recovery point commits with the step's
// business write, or neither does; a stale owner's transaction is refused.
func TestSaveStepTx(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			f := newTxFixture(t, b, 2*time.Second)
			ctx := ctxT(t)
			run := func(owner idem.Owner, commit bool) error {
				tx, err := f.db.BeginTx(ctx, nil)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tx.ExecContext(ctx, insertBiz(b.dialect, f.biz), f.req.Key.ID(), int64(owner.Fence)); err != nil {
					_ = tx.Rollback()
					t.Fatal(err)
				}
				if err := f.s.SaveStepTx(ctx, tx, owner, "reserve", []byte(`"r1"`)); err != nil {
					_ = tx.Rollback()
					return err
				}
				if !commit {
					return tx.Rollback()
				}
				return tx.Commit()
			}
			if err := run(f.owner, false); err != nil {
				t.Fatal(err)
			}
			if got, err := f.s.Steps(ctx, f.owner); err != nil || len(got) != 0 {
				t.Fatalf("Steps after rollback = %q, %v; want none", got, err)
			}
			if err := run(f.owner, true); err != nil {
				t.Fatal(err)
			}
			if got, err := f.s.Steps(ctx, f.owner); err != nil || string(got["reserve"]) != `"r1"` {
				t.Fatalf("Steps after commit = %q, %v", got, err)
			}
			if n := countBiz(t, b.dialect, f.db, f.biz, f.req.Key.ID()); n != 1 {
				t.Fatalf("%d business rows, want 1", n)
			}
			// The owner dies; the next one takes over. The old owner's
			// transaction is refused and rolled back.
			var c idem.Claim
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				var err error
				if c, err = f.s.Begin(ctx, f.req); err != nil {
					t.Fatal(err)
				}
				if c.Outcome == idem.Acquired || time.Now().After(deadline) {
					break
				}
			}
			if c.Outcome != idem.Acquired {
				t.Fatalf("no takeover: %v", c.Outcome)
			}
			if _, err := f.db.ExecContext(ctx, "DELETE FROM "+f.biz); err != nil {
				t.Fatal(err)
			}
			if err := run(f.owner, true); !errors.Is(err, idem.ErrLeaseLost) {
				t.Fatalf("stale SaveStepTx = %v, want ErrLeaseLost", err)
			}
			if n := countBiz(t, b.dialect, f.db, f.biz, f.req.Key.ID()); n != 0 {
				t.Fatalf("%d business rows after the stale owner's rollback, want 0", n)
			}
		})
	}
}

// TestPurgeSteps: Purge deletes the recovery points of the records it
// deletes, and keeps those of live records.
func TestPurgeSteps(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, _ := b.open(t)
			table := testenv.Name("idem")
			s, err := sqlstore.New(db, &sqlstore.Config{Dialect: b.dialect, Table: table})
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t)
			if err := s.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			save := func(id string, retention time.Duration) {
				c, err := s.Begin(ctx, idem.BeginRequest{Key: idem.MustKey("", id), Lease: retention, Retention: retention})
				if err != nil || c.Outcome != idem.Acquired {
					t.Fatalf("Begin = %v, %v", c.Outcome, err)
				}
				for _, name := range []string{"a", "b", "c"} {
					if err := s.SaveStep(ctx, c.Owner, name, []byte("x")); err != nil {
						t.Fatal(err)
					}
				}
			}
			save("short", 300*time.Millisecond)
			save("live", time.Hour)
			count := func() (n int) {
				if err := db.QueryRowContext(ctx, "SELECT count(*) FROM "+table+"_steps").Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			if n := count(); n != 6 {
				t.Fatalf("%d points, want 6", n)
			}
			for deadline := time.Now().Add(30 * time.Second); count() != 3; time.Sleep(100 * time.Millisecond) {
				if _, err := s.Purge(ctx, 0, 2); err != nil {
					t.Fatal(err)
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d points left after the short record expired and Purge ran, want 3", count())
				}
			}
		})
	}
}
