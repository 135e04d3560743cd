package pglock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

func Example() {
	ctx := context.Background()
	db, cleanup := examplePostgres()
	defer cleanup()

	locker, err := pglock.New(db, &pglock.Config{Namespace: testenv.Name("example")})
	if err != nil {
		panic(err)
	}
	if err := locker.Migrate(ctx); err != nil { // creates the fence sequence
		panic(err)
	}
	lease, err := locker.Acquire(ctx, "nightly-report")
	if err != nil {
		panic(err)
	}
	_, err = locker.TryAcquire(ctx, "nightly-report")
	fmt.Println("second holder refused:", errors.Is(err, lock.ErrNotAcquired))
	fmt.Println("fence:", lease.Fence())
	// Release unlocks on the connection that locked, then returns it to the pool.
	fmt.Println("released:", lease.Release(ctx) == nil)
	// Output:
	// second holder refused: true
	// fence: 1
	// released: true
}

// A transaction-level lock lives exactly as long as the caller's
// transaction, which makes it safe behind PgBouncer in transaction mode.
func ExampleLocker_AcquireTx() {
	ctx := context.Background()
	db, cleanup := examplePostgres()
	defer cleanup()
	locker, _ := pglock.New(db, &pglock.Config{Namespace: testenv.Name("example")})
	_ = locker.Migrate(ctx)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		panic(err)
	}
	fence, err := locker.AcquireTx(ctx, tx, "stock:sku-7")
	if err != nil {
		panic(err)
	}
	fmt.Println("fence:", fence)
	_, err = locker.TryAcquire(ctx, "stock:sku-7")
	fmt.Println("others wait while the transaction runs:", errors.Is(err, lock.ErrNotAcquired))
	_ = tx.Commit() // releases the lock

	lease, err := locker.TryAcquire(ctx, "stock:sku-7")
	fmt.Println("free after commit:", err == nil)
	_ = lease.Release(ctx)
	// Output:
	// fence: 1
	// others wait while the transaction runs: true
	// free after commit: true
}

// examplePostgres opens the test PostgreSQL (IDEM_TEST_POSTGRES) in a fresh
// schema that cleanup drops.
func examplePostgres() (*sql.DB, func()) {
	base := testenv.Postgres.DSN()
	admin, err := sql.Open("pgx", base)
	if err != nil {
		panic(err)
	}
	schema := testenv.Name("idem_ex")
	if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
		panic(err)
	}
	u, err := url.Parse(base)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	db, err := sql.Open("pgx", u.String())
	if err != nil {
		panic(err)
	}
	db.SetMaxOpenConns(4)
	return db, func() {
		db.Close()
		_, _ = admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
	}
}
