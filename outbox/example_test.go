package outbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"

	"github.com/idemkit/idem/outbox"
)

// The business write and its event commit together: Enqueue runs in the
// caller's transaction, and a Relay (NewRelay with a broker's Publisher)
// publishes what committed.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleOutbox_Enqueue() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := ob.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'PAID' WHERE id = 42`); err != nil {
		log.Fatal(err)
	}
	if err := ob.Enqueue(ctx, tx, outbox.Message{ID: "order-42/paid", Destination: "orders.paid", Payload: []byte(`{"id":42}`)}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}
}
