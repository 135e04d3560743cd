package formtoken_test

import (
	"database/sql"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/formtoken"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// A payment form protected against double submits: the page renders a
// token issued for the session, and the middleware answers a second submit
// of that token with the first one's response. The tokens live in SQL; it
// needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleNew() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	tokenStore, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	tokens, err := onetime.New(tokenStore, nil)
	if err != nil {
		log.Fatal(err)
	}
	records := memstore.New(nil) // the responses; in production sqlstore, redisstore or tiered
	defer records.Close()
	session := func(r *http.Request) (string, error) {
		c, err := r.Cookie("session")
		if err != nil {
			return "", err
		}
		return "session:" + c.Value, nil
	}
	mw, err := formtoken.New(tokens, records, &formtoken.Config{ScopeFunc: session})
	if err != nil {
		log.Fatal(err)
	}
	pay := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintln(w, "payment accepted")
	})
	http.Handle("POST /pay", mw.Handler(pay))
	log.Fatal(http.ListenAndServe(":8080", nil))
}
