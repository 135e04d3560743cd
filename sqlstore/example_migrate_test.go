package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/sqlstore"
)

// A staged upgrade: the schema moves to version 2 while the previous
// release still runs, and Migrate brings it to the newest later. It needs a
// PostgreSQL server (DATABASE_URL) and a driver registered as "pgx" by the
// program (github.com/jackc/pgx/v5/stdlib), so go test compiles it but
// does not run it.
func ExampleStore_MigrateTo() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.MigrateTo(context.Background(), 2); err != nil {
		log.Fatal(err)
	}
	fmt.Println("records in", store.Table())
}
