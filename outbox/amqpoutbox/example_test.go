package amqpoutbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/amqpoutbox"
)

// A service that marks an order paid and tells RabbitMQ: the event is
// written in the order's transaction, and a relay publishes it to the
// exchange "orders" with routing key "order.paid" once it has committed,
// marking it sent on the broker's confirm.
// It needs a PostgreSQL server (DATABASE_URL), a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib) and
// a RabbitMQ broker (AMQP_URL) with the exchange bound to a queue, so go
// test compiles it but does not run it.
func ExampleNew() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	if err := ob.Migrate(ctx); err != nil {
		log.Fatal(err)
	}

	// New only checks the URL; the publisher dials on its first batch and
	// again after a lost connection, so a broker that is away is retried
	// with the relay's backoff.
	pub, err := amqpoutbox.New(os.Getenv("AMQP_URL"), nil)
	if err != nil {
		log.Fatal(err)
	}
	defer pub.Close()
	relay, err := ob.NewRelay(pub, &outbox.RelayConfig{PublishTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		// Let the passes in hand finish, so their messages are marked sent.
		stopCtx, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		if err := relay.Stop(stopCtx); err != nil {
			log.Print(err)
		}
	}()

	// The business transaction: the update and its event commit together
	// or not at all. The ID is derived from the action, so a retried
	// transaction enqueues the same ID and amqpinbox applies it once.
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE orders SET status = 'PAID' WHERE id = 42`); err != nil {
		log.Fatal(err)
	}
	if err := ob.Enqueue(ctx, tx, outbox.Message{
		ID:          "order-42/paid",
		Destination: "orders/order.paid", // exchange/routing-key (see Route)
		OrderingKey: "order-42",
		Payload:     []byte(`{"id":42}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	<-ctx.Done() // serve until interrupted; the deferred Stop drains the relay
}
