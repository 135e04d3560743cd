package fsm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/internal/testenv"
)

// crashWork runs in the crash child (testenv.RunSQLChild, from TestMain):
// it pays order 1 (committed), then ships it inside a transaction it never
// commits; the harness then says READY and waits for the parent's SIGKILL.
func crashWork(ctx context.Context, c testenv.SQLChild) error {
	m, err := fsm.New(c.Dialect, c.Table, orderDef(), nil)
	if err != nil {
		return err
	}
	if res, err := m.Fire(ctx, c.DB, int64(1), "pay", nil); err != nil || res.Outcome != fsm.Applied {
		return fmt.Errorf("pay: %+v, %v", res, err)
	}
	tx, err := c.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if res, err := m.Fire(ctx, tx, int64(1), "ship", nil); err != nil || res.Outcome != fsm.Applied {
		return fmt.Errorf("ship: %+v, %v", res, err)
	}
	return nil
}

// TestCrashMidTransaction kills a process that applied a transition inside an
// uncommitted transaction. The database rolls the transition back: the row is
// where the last commit left it, nothing is stuck or half-applied, the retry
// of the committed step is a duplicate and the lost step applies normally.
func TestCrashMidTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)

		testenv.KillSQLChild(t, e.dialect, e.dsn, e.table)

		if r := e.row(1); r.State != "PAID" || r.Version != 1 {
			t.Fatalf("after the crash the row is %+v, want PAID v1 (ship rolled back)", r)
		}
		if res := mustFire(t, m, e.db, 1, "pay"); res != (fsm.Result{Outcome: fsm.Duplicate, State: "PAID", Version: 1}) {
			t.Fatalf("retried pay = %+v, want duplicate", res)
		}
		if res := mustFire(t, m, e.db, 1, "ship"); res != (fsm.Result{Outcome: fsm.Applied, State: "SHIPPED", Version: 2}) {
			t.Fatalf("retried ship = %+v, want applied", res)
		}
	})
}
