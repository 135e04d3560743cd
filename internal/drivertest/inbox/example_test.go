package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/inbox"
)

// openExampleDB opens a throw-away SQLite database the way production code
// should open one: WAL, a busy timeout and immediate write transactions.
func openExampleDB() (*sql.DB, func()) {
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		panic(err)
	}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+
		"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// A payment-captured event arrives three times (a producer retry and a broker
// redelivery). The balance is credited once.
func ExampleInbox_Process() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()

	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite})
	if err != nil {
		panic(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		panic(err)
	}
	_, _ = db.ExecContext(ctx, `CREATE TABLE wallet (id TEXT PRIMARY KEY, balance INTEGER NOT NULL)`)
	_, _ = db.ExecContext(ctx, `INSERT INTO wallet VALUES ('w1', 0)`)

	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE wallet SET balance = balance + 500 WHERE id = 'w1'`)
		return err
	}
	for range 3 {
		out, err := ib.Process(ctx, "wallet-service", "evt-8c1f", credit)
		if err != nil {
			fmt.Println("nack:", err) // the broker redelivers
			continue
		}
		fmt.Println(out) // ack in both cases
	}
	var balance int
	_ = db.QueryRowContext(ctx, `SELECT balance FROM wallet WHERE id = 'w1'`).Scan(&balance)
	fmt.Println("balance:", balance)
	// Output:
	// processed
	// duplicate
	// duplicate
	// balance: 500
}

// A failed handler rolls back its dedup row with its work, so the
// redelivery is processed normally: nothing gets stuck, nothing is lost.
func ExampleInbox_Process_handlerFailure() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite})
	_ = ib.Migrate(ctx)

	errDown := errors.New("ledger unavailable")
	attempt := 0
	handler := func(ctx context.Context, tx *sql.Tx) error {
		attempt++
		if attempt == 1 {
			return errDown
		}
		return nil
	}
	for range 3 {
		out, err := ib.Process(ctx, "ledger", "evt-1", handler)
		fmt.Println(out, errors.Is(err, errDown))
	}
	// Output:
	// Outcome(0) true
	// processed false
	// duplicate false
}

// ProcessTx joins the caller's transaction, so the dedup row, the business
// change and an outbox row commit together.
func ExampleInbox_ProcessTx() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite})
	_ = ib.Migrate(ctx)
	_, _ = db.ExecContext(ctx, `CREATE TABLE outbox (topic TEXT, body TEXT)`)

	deliver := func(messageID string) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		defer tx.Rollback() // no-op after Commit
		out, err := ib.ProcessTx(ctx, tx, "shipping", messageID, func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO outbox VALUES ('shipment.requested', ?)`, messageID)
			return err
		})
		if err != nil || out == inbox.Duplicate {
			fmt.Println(out, err)
			return // rolled back by the deferred Rollback
		}
		if err := tx.Commit(); err != nil {
			panic(err)
		}
		fmt.Println(out)
	}
	deliver("order-42-paid")
	deliver("order-42-paid")
	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM outbox`).Scan(&n)
	fmt.Println("outbox rows:", n)
	// Output:
	// processed
	// duplicate <nil>
	// outbox rows: 1
}

// The sweeper deletes dedup rows older than the retention window in bounded
// batches; run it in the background with Start/Stop, or once with Sweep.
func ExampleSweeper() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	ib, _ := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite, Retention: 7 * 24 * time.Hour})
	_ = ib.Migrate(ctx)
	for _, id := range []string{"a", "b", "c"} {
		_, _ = ib.Process(ctx, "c", id, func(context.Context, *sql.Tx) error { return nil })
	}
	// Pretend "a" and "b" were processed eight days ago.
	_, _ = db.ExecContext(ctx, `UPDATE idem_inbox SET created_at = created_at - 8*86400000 WHERE message_id IN ('a', 'b')`)

	sw, err := inbox.NewSweeper(ib, &inbox.SweeperConfig{BatchSize: 1000, Interval: time.Minute})
	if err != nil {
		panic(err)
	}
	n, err := sw.Sweep(ctx)
	fmt.Println("deleted:", n, err)

	if err := sw.Start(ctx); err != nil { // sweeps now, then every minute
		panic(err)
	}
	// … and at shutdown:
	fmt.Println("stopped:", sw.Stop(ctx))
	// Output:
	// deleted: 2 <nil>
	// stopped: <nil>
}
