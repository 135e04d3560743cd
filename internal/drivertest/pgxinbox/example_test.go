package pgxinbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/pgxinbox"
)

// A consumer on pgx: the dedup row and the wallet credit commit together in
// the caller's pgx transaction. (Needs a PostgreSQL server: compile-only.)
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool) // the same pool, for New and Migrate
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		panic(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		panic(err)
	}

	credit := func(ctx context.Context, msgID string, wallet, cents int64) (inbox.Outcome, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(ctx) // a no-op after Commit
		out, err := pgxinbox.ProcessTx(ctx, ib, tx, "wallet", msgID, func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE wallet SET balance = balance + $1 WHERE id = $2`, cents, wallet)
			return err
		})
		if err != nil {
			return 0, err // rolled back; nack and let the broker redeliver
		}
		return out, tx.Commit(ctx)
	}
	out, err := credit(ctx, "payment-captured-42", 7, 1250)
	fmt.Println(out, err) // processed; a redelivery prints duplicate
}

// ProcessBatch: the dedup claim and the business statements in one
// round trip, then COMMIT. A callback checks the debit's result: an error
// there rolls everything back, the dedup row included. (Needs a PostgreSQL
// server: compile-only.)
func ExampleProcessBatch() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		panic(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		panic(err)
	}

	debit := func(b *pgx.Batch) error {
		b.Queue(`UPDATE wallet SET balance = balance - $1 WHERE id = $2 AND balance >= $1`, 1250, 7).
			Exec(func(tag pgconn.CommandTag) error {
				if tag.RowsAffected() != 1 {
					return errors.New("insufficient funds")
				}
				return nil
			})
		b.Queue(`INSERT INTO ledger (wallet, cents, message) VALUES ($1, $2, $3)`, 7, -1250, "order-paid-42")
		return nil
	}
	var out inbox.Outcome
	err = pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
		out, err = pgxinbox.ProcessBatch(ctx, ib, c.Conn(), "wallet", "order-paid-42", debit)
		return err
	})
	fmt.Println(out, err) // processed; a redelivery prints duplicate
}
