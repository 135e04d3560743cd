package watermark_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/watermark"
)

// Account events arrive out of order and twice. Last-writer-wins keeps the
// newest; the late and repeated ones are no-ops, and a delete leaves a
// tombstone that a late update cannot resurrect.
func Example() {
	dir, _ := os.MkdirTemp("", "watermark-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	defer db.Close()
	ctx := context.Background()
	_, _ = db.ExecContext(ctx, `CREATE TABLE account (id TEXT PRIMARY KEY, version INTEGER NOT NULL, deleted BOOLEAN NOT NULL DEFAULT FALSE, balance INTEGER)`)

	accounts, _ := watermark.New("account", &watermark.Config{Dialect: inbox.SQLite})
	events := []struct {
		version int64
		balance int64
		delete  bool
	}{{1, 100, false}, {3, 300, false}, {2, 200, false}, {3, 300, false}, {4, 0, true}, {2, 999, false}}
	for _, e := range events {
		tx, _ := db.BeginTx(ctx, nil) // in real code: the inbox Handler's tx
		var res watermark.Result
		var err error
		if e.delete {
			res, err = accounts.Delete(ctx, tx, "acc-1", e.version)
		} else {
			res, err = accounts.Upsert(ctx, tx, "acc-1", e.version, map[string]any{"balance": e.balance})
		}
		_ = tx.Commit()
		fmt.Printf("v%d delete=%v: %v %v\n", e.version, e.delete, res, err)
	}
	v, deleted, _, _ := accounts.State(ctx, db, "acc-1")
	fmt.Println("version", v, "deleted", deleted)
	// Output:
	// v1 delete=false: applied <nil>
	// v3 delete=false: applied <nil>
	// v2 delete=false: stale <nil>
	// v3 delete=false: duplicate <nil>
	// v4 delete=true: applied <nil>
	// v2 delete=false: stale <nil>
	// version 4 deleted true
}

// Strict mode applies version v only on top of v-1; a gap is an error the
// inbox Handler returns, so the broker redelivers the event later.
func Example_strict() {
	dir, _ := os.MkdirTemp("", "watermark-example")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db"))
	defer db.Close()
	ctx := context.Background()
	_, _ = db.ExecContext(ctx, `CREATE TABLE ledger (id TEXT PRIMARY KEY, version INTEGER NOT NULL, deleted BOOLEAN NOT NULL DEFAULT FALSE, total INTEGER)`)
	ledger, _ := watermark.New("ledger", &watermark.Config{Dialect: inbox.SQLite, Mode: watermark.Strict})

	for _, v := range []int64{1, 3, 2, 3} {
		res, err := ledger.Upsert(ctx, db, "L1", v, map[string]any{"total": v * 10})
		fmt.Println(v, res, err)
	}
	// Output:
	// 1 applied <nil>
	// 3 Result(0) watermark: version gap: ledger L1 is at version 1, event has version 3
	// 2 applied <nil>
	// 3 applied <nil>
}
