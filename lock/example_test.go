package lock_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"

	"github.com/idemkit/idem/internal/testenv"
	"github.com/idemkit/idem/lock"
	"github.com/idemkit/idem/lock/pglock"
)

// The seed's distributed-lock pattern: take the lock, re-read the state
// inside it (the double check), return success if the work is already done,
// otherwise do it and record it with a fenced write. The second call finds
// the order paid and answers success without charging again.
func ExampleDo() {
	ctx := context.Background()
	db, cleanup := examplePostgres()
	defer cleanup()
	_, _ = db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT NOT NULL, fence BIGINT NOT NULL DEFAULT 0)`)
	_, _ = db.ExecContext(ctx, `INSERT INTO orders (id, status) VALUES ('A-1', 'created')`)

	locker, err := pglock.New(db, &pglock.Config{Namespace: "example-" + testenv.Name("do")})
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
	// Output:
	// charging the card
	// already paid: idempotent success
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
