package fsm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/fsm"
	"github.com/idemkit/idem/lock"
	_ "modernc.org/sqlite"
)

// Transitions fenced by lock fences. Holder B (fence 8) took the order's lock
// after holder A's (fence 7) expired while A was paused; B pays the order.
// A wakes up and tries to cancel it, a move the machine allows from PAID:
// the row carries B's newer fence, so A is refused and writes nothing. In a
// real service the fences come from lock.Lease.Fence (redislock, pglock).
func ExampleOptions_fence() {
	dir, err := os.MkdirTemp("", "fsm-fence-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (
		id INTEGER PRIMARY KEY, status TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 0,
		fence INTEGER NOT NULL DEFAULT 0)`); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES (42, 'CREATED')`); err != nil {
		log.Fatal(err)
	}
	orders, err := fsm.New(fsm.SQLite, "orders", fsm.Definition{
		Initial: "CREATED",
		States:  []string{"CREATED", "PAID", "CANCELLED"},
		Transitions: []fsm.Transition{
			{Name: "pay", From: []string{"CREATED"}, To: "PAID"},
			{Name: "cancel", From: []string{"CREATED", "PAID"}, To: "CANCELLED"},
		},
	}, &fsm.Config{FenceColumn: "fence"})
	if err != nil {
		log.Fatal(err)
	}

	const fenceA, fenceB lock.Fence = 7, 8
	res, err := orders.Fire(ctx, db, 42, "pay", &fsm.Options{Fence: fenceB})
	fmt.Println("B pays:", res.Outcome, res.State, err)

	_, err = orders.Fire(ctx, db, 42, "cancel", &fsm.Options{Fence: fenceA})
	var stale *lock.StaleFenceError
	fmt.Println("A cancels: stale fence:", errors.As(err, &stale), "row carries", stale.Current)

	var status string
	if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = 42`).Scan(&status); err != nil {
		log.Fatal(err)
	}
	fmt.Println("order:", status)
	// Output:
	// B pays: applied PAID <nil>
	// A cancels: stale fence: true row carries 8
	// order: PAID
}
