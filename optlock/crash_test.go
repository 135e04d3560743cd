package optlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/testenv"
)

const (
	crashChildEnv = "IDEM_OPTLOCK_CRASH_CHILD" // the dialect; its presence makes TestMain run crashChild
	crashDSNEnv   = "IDEM_OPTLOCK_CRASH_DSN"
	crashTableEnv = "IDEM_OPTLOCK_CRASH_TABLE"
)

// crashChild runs in a re-executed test binary: it reads account 1, writes
// its compare-and-set inside a transaction it never commits, says READY and
// waits for the parent's SIGKILL.
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
	table := os.Getenv(crashTableEnv)
	tbl, err := NewTable(d, table, nil)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		fail(err)
	}
	var balance, version int64
	if err := tx.QueryRowContext(ctx, "SELECT balance, version FROM "+table+" WHERE id = 1").Scan(&balance, &version); err != nil {
		fail(err)
	}
	if err := tbl.Update(ctx, tx, int64(1), version, map[string]any{"balance": balance - 100}); err != nil {
		fail(err)
	}
	fmt.Println("READY")
	time.Sleep(2 * time.Minute) // the parent kills us long before
	os.Exit(3)
}

// TestCrashMidWrite kills a writer after its compare-and-set, before its
// commit. The database discards the write: the version is untouched, and the
// next writer holding the same version succeeds, instead of the row being
// lost or stuck.
func TestCrashMidWrite(t *testing.T) {
	eachDB(t, func(t *testing.T, e *env) {
		e.insert(1, 500, 3)
		line := testenv.KillAtLine(t, "", time.Minute,
			[]string{crashChildEnv + "=" + e.dialect.String(), crashDSNEnv + "=" + e.dsn, crashTableEnv + "=" + e.table},
			"-test.run=^$")
		if line != "READY" {
			t.Fatalf("child said %q, want READY", line)
		}

		if a := e.row(1); a.Balance != 500 || a.Version != 3 {
			t.Fatalf("after the crash the row is %+v, want balance 500 at version 3", a)
		}
		ctx := context.Background()
		if err := e.tbl.Update(ctx, e.db, int64(1), 3, map[string]any{"balance": 400}); err != nil {
			t.Fatalf("next writer at version 3: %v", err)
		}
		if err := e.tbl.Update(ctx, e.db, int64(1), 3, map[string]any{"balance": 300}); !errors.Is(err, ErrConflict) {
			t.Fatalf("stale writer: %v", err)
		}
		if a := e.row(1); a.Balance != 400 || a.Version != 4 {
			t.Fatalf("row = %+v", a)
		}
	})
}
