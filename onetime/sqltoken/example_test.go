package sqltoken_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// One-time tokens kept in SQL: a token issued for a scope is consumed
// once; the second Consume is refused.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleNew() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	tokens, err := onetime.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	tok, err := tokens.Issue(ctx, "session:alice")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(tokens.Consume(ctx, "session:alice", tok))
	fmt.Println(onetime.IsRejected(tokens.Consume(ctx, "session:alice", tok)))
}
