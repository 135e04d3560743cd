package lock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

// Do takes the lock, runs the work under the lease's context and gives
// the lock back; a lease lost while the work ran shows in the error.
// Any lock.Locker serves: pglock here, redislock the same way.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleDo() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	locker, err := pglock.New(db, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := locker.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	err = lock.Do(ctx, locker, "report:2026-12", func(ctx context.Context, fence lock.Fence) error {
		if err := lock.Valid(ctx); err != nil { // right before the write a paused holder must not make
			return err
		}
		fmt.Println("writing the report, fence", fence)
		return nil
	})
	if errors.Is(err, lock.ErrNotAcquired) {
		fmt.Println("another replica is on it")
	} else if err != nil {
		log.Fatal(err)
	}
}
