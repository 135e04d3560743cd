package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlstore"
)

// openExampleDB opens a SQLite database in a fresh directory; cleanup
// closes it and removes the directory.
func openExampleDB() (db *sql.DB, cleanup func()) {
	dir, err := os.MkdirTemp("", "idem-example")
	if err != nil {
		log.Fatal(err)
	}
	db, err = sql.Open("sqlite", sqlstore.SQLiteDSN(filepath.Join(dir, "idem.db")))
	if err != nil {
		log.Fatal(err)
	}
	return db, func() { db.Close(); os.RemoveAll(dir) }
}

// Open the database, create the store and its table once at start-up.
func Example() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()

	store, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil { // safe to run from every instance
		log.Fatal(err)
	}

	key := idem.MustKey("tenant-42", "order-1001")
	first, _ := store.Begin(ctx, idem.BeginRequest{Key: key})
	second, _ := store.Begin(ctx, idem.BeginRequest{Key: key})
	fmt.Println(first.Outcome, second.Outcome)
	// Output: acquired in_flight
}

// idem.Do runs a function once per key, however often it is called.
func Example_do() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	store, _ := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite})
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	type Receipt struct{ Charged int }
	charges := 0
	charge := func(ctx context.Context) (Receipt, error) {
		charges++
		return Receipt{Charged: 100}, nil
	}
	key := idem.MustKey("tenant-42", "charge-7")
	for range 3 { // a client that retries
		r, err := idem.Do(ctx, store, key, nil, charge)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("receipt:", r.Charged)
	}
	fmt.Println("charged", charges, "time(s)")
	// Output:
	// receipt: 100
	// receipt: 100
	// receipt: 100
	// charged 1 time(s)
}

// The business change and the record's completion commit in one
// transaction: after a crash either both happened (a retry replays) or
// neither (a retry executes).
func ExampleStore_CompleteTx() {
	db, cleanup := openExampleDB()
	defer cleanup()
	ctx := context.Background()
	store, _ := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite})
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE payments (order_id TEXT PRIMARY KEY, amount INTEGER)"); err != nil {
		log.Fatal(err)
	}

	pay := func(orderID string, amount int) (string, error) {
		key := idem.MustKey("shop", orderID)
		claim, err := store.Begin(ctx, idem.BeginRequest{Key: key})
		if err != nil {
			return "", err
		}
		switch claim.Outcome {
		case idem.Replay:
			return string(claim.Result) + " (replayed)", nil
		case idem.InFlight, idem.Mismatch:
			return "", claim.Err()
		}
		// On any failure, roll back and give the claim up so that a retry
		// runs at once. Release only frees a claim still in progress: after
		// a Commit whose answer was lost it changes nothing.
		committed := false
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			_ = store.Release(ctx, claim.Owner)
			return "", err
		}
		defer func() {
			if !committed {
				_ = tx.Rollback()
				_ = store.Release(ctx, claim.Owner)
			}
		}()
		if _, err := tx.ExecContext(ctx, "INSERT INTO payments VALUES (?, ?)", orderID, amount); err != nil {
			return "", err
		}
		receipt := fmt.Sprintf("paid %d", amount)
		if err := store.CompleteTx(ctx, tx, claim.Owner, []byte(receipt)); err != nil {
			return "", err // ErrLeaseLost: another caller owns the key now
		}
		if err := tx.Commit(); err != nil {
			return "", err
		}
		committed = true
		return receipt, nil
	}

	for range 2 {
		r, err := pay("order-1", 250)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(r)
	}
	var rows int
	_ = db.QueryRowContext(ctx, "SELECT count(*) FROM payments").Scan(&rows)
	fmt.Println("payments:", rows)
	// Output:
	// paid 250
	// paid 250 (replayed)
	// payments: 1
}
