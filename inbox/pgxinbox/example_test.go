package pgxinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/pgxinbox"
)

// A message handled once inside the caller's pgx transaction: the dedup
// row and the handler's write commit together, and a redelivery finds the
// row and skips the handler. It needs a PostgreSQL server (DATABASE_URL),
// so go test compiles it but does not run it.
func ExampleProcessTx() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close(ctx)
	// New and Migrate take database/sql: pgx's own driver, registered as
	// "pgx" by importing github.com/jackc/pgx/v5/stdlib in the program.
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	ship := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE orders SET status = 'SHIPPED' WHERE id = 42`)
		return err
	}
	for range 2 { // the broker delivers "order-42/shipped" twice
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			out, err := pgxinbox.ProcessTx(ctx, ib, tx, "shipping", "order-42/shipped", ship)
			fmt.Println(out)
			return err
		})
		if err != nil {
			log.Fatal(err)
		}
	}
}
