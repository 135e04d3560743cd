package optlock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/optlock"
)

// crashWork runs in the crash child (testenv.RunSQLChild, from TestMain):
// it reads account 1 and writes its compare-and-set inside a transaction it
// never commits; the harness then says READY and waits for the parent's
// SIGKILL.
func crashWork(ctx context.Context, c testenv.SQLChild) error {
	table := c.Table
	tbl, err := optlock.NewTable(c.Dialect, table, nil)
	if err != nil {
		return err
	}
	tx, err := c.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	var balance, version int64
	if err := tx.QueryRowContext(ctx, "SELECT balance, version FROM "+table+" WHERE id = 1").Scan(&balance, &version); err != nil {
		return err
	}
	if err := tbl.Update(ctx, tx, int64(1), version, map[string]any{"balance": balance - 100}); err != nil {
		return err
	}
	return nil
}

// TestCrashMidWrite kills a writer after its compare-and-set, before its
// commit. The database discards the write: the version is untouched, and the
// next writer holding the same version succeeds, instead of the row being
// lost or stuck.
func TestCrashMidWrite(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		e.insert(1, 500, 3)
		testenv.KillSQLChild(t, e.dialect, e.dsn, e.table)

		if a := e.row(1); a.Balance != 500 || a.Version != 3 {
			t.Fatalf("after the crash the row is %+v, want balance 500 at version 3", a)
		}
		ctx := context.Background()
		if err := e.tbl.Update(ctx, e.db, int64(1), 3, map[string]any{"balance": 400}); err != nil {
			t.Fatalf("next writer at version 3: %v", err)
		}
		if err := e.tbl.Update(ctx, e.db, int64(1), 3, map[string]any{"balance": 300}); !errors.Is(err, optlock.ErrConflict) {
			t.Fatalf("stale writer: %v", err)
		}
		if a := e.row(1); a.Balance != 400 || a.Version != 4 {
			t.Fatalf("row = %+v", a)
		}
	})
}
