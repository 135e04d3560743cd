package lock_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

// The distributed-lock pattern: take the lock, re-read the state
// inside it (the double check), return success if the work is already done,
// otherwise do it and record it with a fenced write. The second call finds
// the order paid and answers success without charging again.
//
// It needs PostgreSQL (IDEM_TEST_POSTGRES, default
// postgres://postgres@127.0.0.1:5432/test), so it has no Output line and does
// not run under go test; TestExamples runs it against the test server and
// checks that it prints:
//
//	charging the card
//	already paid: idempotent success
func ExampleDo() {
	ctx := context.Background()
	db, namespace, cleanup := examplePostgres()
	defer cleanup()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES ('A-1', 'created')`); err != nil {
		panic(err)
	}

	locker, err := pglock.New(db, &pglock.Config{Namespace: namespace})
	if err != nil {
		panic(err)
	}
	if err := locker.Migrate(ctx); err != nil {
		panic(err)
	}
	orders := lock.FencedTable{Table: "orders", KeyColumn: "id"}

	pay := func(ctx context.Context, fence lock.Fence) error {
		var status string
		if err := db.QueryRowContext(ctx, `SELECT status FROM orders WHERE id = 'A-1'`).Scan(&status); err != nil {
			return err
		}
		if status == "paid" {
			fmt.Println("already paid: idempotent success")
			return nil
		}
		fmt.Println("charging the card")
		// The fenced write is refused if a newer holder has written,
		// e.g. because this one paused past its lease.
		return orders.Update(ctx, db, "A-1", fence, "status = $1", "paid")
	}
	for range 2 { // a retry, a redelivery, a double click
		if err := lock.Do(ctx, locker, "pay:A-1", pay); err != nil {
			fmt.Println("error:", err)
		}
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
