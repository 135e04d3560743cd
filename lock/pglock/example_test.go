package pglock_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

// One nightly job at a time across every replica of a service, under a
// PostgreSQL advisory lock; the fence goes with the job's writes.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleLocker_Acquire() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	locker, err := pglock.New(db, &pglock.Config{Namespace: "billing"})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := locker.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, locker, "nightly-invoices", func(ctx context.Context, fence lock.Fence) error {
		fmt.Println("invoicing under fence", fence)
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
