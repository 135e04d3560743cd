package inbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/inbox"
)

// A consumer handles each message once: the inbox row and the handler's
// writes commit in one transaction, and a redelivery is skipped.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleInbox_Process() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	credit := func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 7`)
		return err
	}
	for range 2 { // the broker delivers the message twice
		out, err := ib.Process(ctx, "billing", "msg-1", credit)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(out)
	}
}
