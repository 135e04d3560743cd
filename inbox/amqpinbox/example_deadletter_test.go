package amqpinbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
)

// Poison goes to a dead-letter exchange; a delivery that can never be
// applied says so with inbox.Permanent. Without DeadLetterExchange the
// subscriber would declare and use the queue "shipping.dead-letter".
// Watch Done and Err: the subscriber ends when its connection does.
// (Needs RabbitMQ and PostgreSQL.)
func Example_deadLetters() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	handler := func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		if d.ContentType != "application/json" {
			return inbox.Permanent(errors.New("not JSON: " + d.ContentType))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, d.MessageId)
		return err
	}
	sub, err := amqpinbox.New(ib, conn, handler, &amqpinbox.Config{
		Queue:              "shipping",
		DeadLetterExchange: "shipping-dlx",
		// promidem.NewInboxObserver(prometheus.DefaultRegisterer) counts
		// idem_inbox_messages_total{adapter, consumer, outcome}.
		Observer: inbox.ObserverFunc(func(d inbox.Delivery) {
			if d.Outcome == inbox.DeliveryDeadLettered {
				log.Printf("%s: a message was dead-lettered", d.Consumer)
			}
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		log.Fatal(err)
	}
	select {
	case <-sub.Done():
		log.Printf("subscriber ended: %v", sub.Err()) // reconnect and start a new one
	case <-time.After(time.Second):
		_ = sub.Stop(ctx)
	}
}
