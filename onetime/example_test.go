package onetime_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// A token guards a one-shot action (an emailed link, a password reset):
// Take claims it for this use, and a failed action gives it back with
// Restore, so that the user can try again.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleTokens_Take() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	tokens, err := onetime.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	tok, err := tokens.Issue(ctx, "user:7")
	if err != nil {
		log.Fatal(err)
	}
	receipt, err := tokens.Take(ctx, "user:7", tok, onetime.NewUse())
	if err != nil {
		log.Fatal(err)
	}
	send := func() error { return errors.New("mail server down") }
	if err := send(); err != nil {
		if err := tokens.Restore(ctx, receipt); err != nil {
			log.Fatal(err)
		}
		fmt.Println("not sent; the token can be used again")
	}
}
