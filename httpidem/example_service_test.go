package httpidem_test

import (
	"context"
	"database/sql"
	"log"
	"net/http"

	"github.com/idemkit/idem/httpidem"
	"github.com/idemkit/idem/sqlstore"
)

// A service's main: an SQL store (SQLite here; PostgreSQL or MySQL the
// same way), its schema, and the middleware in front of the service's
// handlers. The program also imports a database/sql driver, for SQLite
// modernc.org/sqlite: import _ "modernc.org/sqlite". README.md quotes
// this body as a whole program (TestReadmeQuotesExampleService).
func Example_service() {
	db, err := sql.Open("sqlite", sqlstore.SQLiteDSN("idem.db"))
	if err != nil {
		log.Fatal(err)
	}
	store, err := sqlstore.New(db, &sqlstore.Config{Dialect: sqlstore.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(context.Background()); err != nil {
		log.Fatal(err)
	}
	// POST and PATCH requests with an Idempotency-Key run once.
	mw, err := httpidem.New(store, nil)
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		// Charge the card and create the order: once per key.
		w.WriteHeader(http.StatusCreated)
	})
	log.Fatal(http.ListenAndServe(":8080", mw.Handler(mux)))
}
