package fsm_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/fsm"
)

// An order row moves CREATED → PAID once: a second "pay" finds it PAID
// and reports a duplicate instead of charging again.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleMachine_Fire() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	orders, err := fsm.New(fsm.Postgres, "orders", fsm.Definition{
		Initial: "CREATED",
		States:  []string{"CREATED", "PAID", "SHIPPED"},
		Transitions: []fsm.Transition{
			{Name: "pay", From: []string{"CREATED"}, To: "PAID"},
			{Name: "ship", From: []string{"PAID"}, To: "SHIPPED"},
		},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	for range 2 {
		res, err := orders.Fire(context.Background(), db, 42, "pay", nil)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.Outcome, res.State)
	}
}
