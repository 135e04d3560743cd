package optlock_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/idemkit/idem/optlock"
)

// A read-modify-write under optimistic locking: Update succeeds only if
// the row is still at the version read, and Do retries the whole
// read-modify-write when another writer got there first.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleDo() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	accounts, err := optlock.NewTable(optlock.Postgres, "accounts", nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	err = optlock.Do(ctx, nil, func(ctx context.Context, attempt int) error {
		var balance, version int64
		if err := db.QueryRowContext(ctx, `SELECT balance, version FROM accounts WHERE id = 7`).Scan(&balance, &version); err != nil {
			return err
		}
		return accounts.Update(ctx, db, 7, version, map[string]any{"balance": balance + 10})
	})
	if err != nil {
		log.Fatal(err)
	}
}
