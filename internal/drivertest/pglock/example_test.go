package pglock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

// Take a lock, see a second holder refused, and release it. It needs
// PostgreSQL (IDEM_TEST_POSTGRES, default
// postgres://postgres@127.0.0.1:5432/test), so it has no Output line and does
// not run under go test; TestExamples runs it against the test server and
// checks that it prints:
//
//	second holder refused: true
//	fence: 1
//	released: true
func Example() {
	ctx := context.Background()
	db, namespace, cleanup := examplePostgres()
	defer cleanup()

	locker, err := pglock.New(db, &pglock.Config{Namespace: namespace})
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
}

// A transaction-level lock lives exactly as long as the caller's
// transaction, which makes it safe behind PgBouncer in transaction mode.
// Like Example it needs PostgreSQL; TestExamples checks that it prints:
//
//	fence: 1
//	others wait while the transaction runs: true
//	free after commit: true
func ExampleLocker_AcquireTx() {
	ctx := context.Background()
	db, namespace, cleanup := examplePostgres()
	defer cleanup()
	locker, err := pglock.New(db, &pglock.Config{Namespace: namespace})
	if err != nil {
		panic(err)
	}
	if err := locker.Migrate(ctx); err != nil {
		panic(err)
	}

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
	if err == nil {
		_ = lease.Release(ctx)
	}
}

// examplePostgres opens IDEM_TEST_POSTGRES (default
// postgres://postgres@127.0.0.1:5432/test) in a fresh schema that cleanup
// drops, and returns that schema's name as a lock namespace of its own.
func examplePostgres() (*sql.DB, string, func()) {
	base := os.Getenv("IDEM_TEST_POSTGRES")
	if base == "" {
		base = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable&connect_timeout=5"
	}
	admin, err := sql.Open("pgx", base)
	if err != nil {
		panic(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "idem_ex_" + hex.EncodeToString(b[:])
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
	return db, schema, func() {
		db.Close()
		_, _ = admin.Exec("DROP SCHEMA " + schema + " CASCADE")
		admin.Close()
	}
}
