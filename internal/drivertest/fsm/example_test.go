package fsm_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/idemkit/idem/fsm"
	_ "modernc.org/sqlite"
)

// The order machine of the package documentation, run on SQLite: a first
// payment applies, the redelivered callback is a duplicate (success, nothing
// written), a payment arriving after shipping is a duplicate too, and
// cancelling a shipped order is an anomaly that reaches the alert hook.
func Example() {
	dir, err := os.MkdirTemp("", "fsm-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "shop.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (
		id INTEGER PRIMARY KEY, status TEXT NOT NULL, version INTEGER NOT NULL DEFAULT 0, paid_at TEXT)`); err != nil {
		log.Fatal(err)
	}

	orders, err := fsm.New(fsm.SQLite, "orders", fsm.Definition{
		Initial: "CREATED",
		States:  []string{"CREATED", "PAID", "SHIPPED", "DELIVERED", "CANCELLED"},
		Transitions: []fsm.Transition{
			{Name: "pay", From: []string{"CREATED"}, To: "PAID"},
			{Name: "ship", From: []string{"PAID"}, To: "SHIPPED"},
			{Name: "deliver", From: []string{"SHIPPED"}, To: "DELIVERED"},
			{Name: "cancel", From: []string{"CREATED", "PAID"}, To: "CANCELLED"},
		},
	}, &fsm.Config{
		OnIllegalFunc: func(ctx context.Context, err *fsm.IllegalTransitionError) {
			fmt.Printf("ALERT: order %v is %s, cannot %s\n", err.ID, err.Current, err.Transition)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO orders (id, status) VALUES (?, ?)", 42, orders.Initial()); err != nil {
		log.Fatal(err)
	}

	fire := func(transition string, opts *fsm.Options) {
		res, err := orders.Fire(ctx, db, 42, transition, opts)
		switch {
		case errors.Is(err, fsm.ErrIllegalTransition):
			fmt.Printf("%-7s illegal\n", transition)
		case err != nil:
			log.Fatal(err)
		default:
			fmt.Printf("%-7s %-9s -> %s v%d\n", transition, res.Outcome, res.State, res.Version)
		}
	}
	paid := &fsm.Options{Set: map[string]any{"paid_at": "2026-03-01T10:00:00Z"}}
	fire("pay", paid)
	fire("pay", paid) // the payment provider calls back again
	fire("ship", nil)
	fire("pay", paid) // a very late callback
	fire("cancel", nil)
	// Output:
	// pay     applied   -> PAID v1
	// pay     duplicate -> PAID v1
	// ship    applied   -> SHIPPED v2
	// pay     duplicate -> SHIPPED v2
	// ALERT: order 42 is SHIPPED, cannot cancel
	// cancel  illegal
}

// Guarding with the version the caller read: the decision was taken on that
// read, so it must not apply to a row that changed since.
func ExampleOptions_version() {
	db, err := sql.Open("sqlite", "file::memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1) // one in-memory database
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE tickets (id INTEGER PRIMARY KEY, status TEXT NOT NULL, version INTEGER NOT NULL);
		INSERT INTO tickets VALUES (7, 'OPEN', 0)`); err != nil {
		log.Fatal(err)
	}
	tickets, err := fsm.New(fsm.SQLite, "tickets", fsm.Definition{
		Initial: "OPEN",
		States:  []string{"OPEN", "ESCALATED", "CLOSED"},
		Transitions: []fsm.Transition{
			{Name: "escalate", From: []string{"OPEN"}, To: "ESCALATED"},
			{Name: "close", From: []string{"OPEN", "ESCALATED"}, To: "CLOSED"},
		},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}

	// An agent read the ticket at version 0 and decided to close it.
	seen := int64(0)
	// Meanwhile the ticket is escalated.
	if _, err := tickets.Fire(ctx, db, 7, "escalate", nil); err != nil {
		log.Fatal(err)
	}
	_, err = tickets.Fire(ctx, db, 7, "close", &fsm.Options{Version: &seen})
	fmt.Println(errors.Is(err, fsm.ErrStaleVersion))
	fmt.Println(err)
	// Output:
	// true
	// fsm: stale version for transition "close" on tickets id 7: expected version 0, row is at 1 (state "ESCALATED")
}

func ExampleMachine_Mermaid() {
	m, err := fsm.New(fsm.Postgres, "payments", fsm.Definition{
		Initial: "INIT",
		States:  []string{"INIT", "DEDUCTED", "CREDITED"},
		Transitions: []fsm.Transition{
			{Name: "deduct", From: []string{"INIT"}, To: "DEDUCTED"},
			{Name: "credit", From: []string{"DEDUCTED"}, To: "CREDITED"},
		},
	}, nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(m.Mermaid())
	// Output:
	// stateDiagram-v2
	//     [*] --> INIT
	//     INIT --> DEDUCTED: deduct
	//     DEDUCTED --> CREDITED: credit
	//     CREDITED --> [*]
}

func ExampleNew_cycle() {
	_, err := fsm.New(fsm.Postgres, "jobs", fsm.Definition{
		Initial: "queued",
		States:  []string{"queued", "running", "done"},
		Transitions: []fsm.Transition{
			{Name: "start", From: []string{"queued"}, To: "running"},
			{Name: "finish", From: []string{"running"}, To: "done"},
			{Name: "rerun", From: []string{"done"}, To: "queued"},
		},
	}, nil)
	fmt.Println(err)
	// Output:
	// fsm: invalid Definition.Transitions: cycle queued → running → done → queued: states must only move forward (one-directional, acyclic)
}
