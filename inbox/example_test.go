package inbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/step"
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

// A message processed in steps: the handler runs the message's work with
// step.Do under the message's key, so a redelivery (after a crash or an
// error in the middle of the handler) skips the steps that finished and
// the card is charged once. In a consumer the handler is the one given to
// Process or to a broker adapter (natsinbox.New): its own writes go
// through the inbox's transaction, while each local step commits in a
// transaction of its own. memstore stands in for the steps' store here; a
// consumer keeps them in sqlstore or redisstore.
func ExampleMessageKey() {
	store := memstore.New(nil)
	defer store.Close()
	charges, carrierDown := 0, true
	handle := func(ctx context.Context, consumer, messageID string) (string, error) {
		key, err := inbox.MessageKey(consumer, messageID)
		if err != nil {
			return "", inbox.Permanent(err) // no key: dead-letter it
		}
		return step.Do(ctx, store, key, nil, func(ctx context.Context, op *step.Op) (string, error) {
			charge, err := step.Run(ctx, op, "charge", nil, func(ctx context.Context, s *step.Step) (string, error) {
				charges++ // the provider's call, with s.Key() as its idempotency key
				return "ch-1", nil
			})
			if err != nil {
				return "", err
			}
			return step.Run(ctx, op, "ship", nil, func(ctx context.Context, s *step.Step) (string, error) {
				if carrierDown {
					carrierDown = false
					return "", errors.New("carrier unreachable")
				}
				return "shipped, paid by " + charge, nil
			})
		})
	}
	ctx := context.Background()
	for delivery := 1; delivery <= 2; delivery++ { // redelivered until the handler succeeds
		receipt, err := handle(ctx, "shipping", "order-42")
		fmt.Printf("delivery %d: %q %v\n", delivery, receipt, err)
	}
	fmt.Println("charges:", charges)
	// Output:
	// delivery 1: "" carrier unreachable
	// delivery 2: "shipped, paid by ch-1" <nil>
	// charges: 1
}
