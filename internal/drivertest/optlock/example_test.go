package optlock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"

	"github.com/idemkit/idem/optlock"
	_ "modernc.org/sqlite"
)

var errInsufficient = errors.New("insufficient funds")

// A withdrawal as a read-modify-write: read balance and version, decide, write
// with "WHERE version = ?". The first attempt loses to a deposit that lands
// between its read and its write; the second reads again and wins.
func Example() {
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, version INTEGER NOT NULL);
		INSERT INTO accounts VALUES (1, 100, 0)`); err != nil {
		log.Fatal(err)
	}
	accounts, err := optlock.NewTable(optlock.SQLite, "accounts", nil)
	if err != nil {
		log.Fatal(err)
	}

	withdraw := func(id, amount int64) error {
		return optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
			var balance, version int64
			if err := db.QueryRowContext(ctx, "SELECT balance, version FROM accounts WHERE id = ?", id).
				Scan(&balance, &version); err != nil {
				return err
			}
			if balance < amount {
				return errInsufficient
			}
			if attempt == 1 { // meanwhile, somebody deposits 50
				if _, err := db.ExecContext(ctx, "UPDATE accounts SET balance = balance + 50, version = version + 1 WHERE id = ?", id); err != nil {
					return err
				}
			}
			err := accounts.Update(ctx, db, id, version, map[string]any{"balance": balance - amount})
			fmt.Printf("attempt %d at version %d: %v\n", attempt, version, err)
			return err
		})
	}
	fmt.Println("withdraw 80:", withdraw(1, 80))
	fmt.Println("withdraw 80:", withdraw(1, 80))

	var balance, version int64
	if err := db.QueryRowContext(ctx, "SELECT balance, version FROM accounts WHERE id = 1").Scan(&balance, &version); err != nil {
		log.Fatal(err)
	}
	fmt.Println("balance", balance, "version", version)
	// Output:
	// attempt 1 at version 0: optlock: version conflict: accounts id 1 is not at version 0
	// attempt 2 at version 1: <nil>
	// withdraw 80: <nil>
	// withdraw 80: insufficient funds
	// balance 70 version 2
}

// Giving up: when every attempt conflicts, Do returns an error that is
// ErrConflict, and the caller decides (answer 409, queue, try later).
func ExampleDo_conflict() {
	err := optlock.Do(context.Background(), &optlock.Config{MaxAttempts: 3},
		func(ctx context.Context, attempt int) error {
			return fmt.Errorf("hot row: %w", optlock.ErrConflict)
		})
	fmt.Println(errors.Is(err, optlock.ErrConflict))
	fmt.Println(err)
	// Output:
	// true
	// optlock: 3 attempt(s), all conflicted; last: hot row: optlock: version conflict
}
