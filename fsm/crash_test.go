package fsm

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/testenv"
)

const (
	crashChildEnv = "IDEM_FSM_CRASH_CHILD" // the dialect; its presence makes TestMain run crashChild
	crashDSNEnv   = "IDEM_FSM_CRASH_DSN"
	crashTableEnv = "IDEM_FSM_CRASH_TABLE"
)

// crashChild runs in a re-executed test binary: it pays order 1 (committed),
// then ships it inside a transaction it never commits, says READY, and waits
// for the parent's SIGKILL.
func crashChild() {
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(2)
	}
	d, err := sqldialect.Parse(os.Getenv(crashChildEnv))
	if err != nil {
		fail(err)
	}
	db, err := sql.Open(testenv.DriverName(d), os.Getenv(crashDSNEnv))
	if err != nil {
		fail(err)
	}
	m, err := New(d, os.Getenv(crashTableEnv), orderDef(), nil)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	if res, err := m.Fire(ctx, db, int64(1), "pay", nil); err != nil || res.Outcome != Applied {
		fail(fmt.Errorf("pay: %+v, %v", res, err))
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
	}
	if res, err := m.Fire(ctx, tx, int64(1), "ship", nil); err != nil || res.Outcome != Applied {
		fail(fmt.Errorf("ship: %+v, %v", res, err))
	}
	fmt.Println("READY")
	time.Sleep(2 * time.Minute) // the parent kills us long before
	os.Exit(3)
}

// TestCrashMidTransaction kills a process that applied a transition inside an
// uncommitted transaction. The database rolls the transition back: the row is
// where the last commit left it, nothing is stuck or half-applied, the retry
// of the committed step is a duplicate and the lost step applies normally.
func TestCrashMidTransaction(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		m := e.machine(nil)
		e.insert(1, "CREATED", 0)

		line := testenv.KillAtLine(t, "", time.Minute,
			[]string{crashChildEnv + "=" + e.dialect.String(), crashDSNEnv + "=" + e.dsn, crashTableEnv + "=" + e.table},
			"-test.run=^$")
		if line != "READY" {
			t.Fatalf("child said %q, want READY", line)
		}

		if r := e.row(1); r.State != "PAID" || r.Version != 1 {
			t.Fatalf("after the crash the row is %+v, want PAID v1 (ship rolled back)", r)
		}
		if res := mustFire(t, m, e.db, 1, "pay"); res != (Result{Outcome: Duplicate, State: "PAID", Version: 1}) {
			t.Fatalf("retried pay = %+v, want duplicate", res)
		}
		if res := mustFire(t, m, e.db, 1, "ship"); res != (Result{Outcome: Applied, State: "SHIPPED", Version: 2}) {
			t.Fatalf("retried ship = %+v, want applied", res)
		}
	})
}
