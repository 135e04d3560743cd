package natsinbox_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"log"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
)

// Poison goes to a dead-letter stream; a payload that can never be applied
// says so with inbox.Permanent and is dead-lettered on its first delivery.
// A database outage is not poison: those messages wait and are applied
// once the database is back. (Needs a NATS server and PostgreSQL.)
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
	nc, err := nats.Connect(nats.DefaultURL)
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	// The dead-letter stream must exist before anything is dead-lettered.
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "PAYMENTS_DLQ", Subjects: []string{"PAYMENTS_DLQ.>"}}); err != nil {
		log.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, "PAYMENTS", jetstream.ConsumerConfig{
		Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy,
		MaxDeliver: -1, // the subscriber decides when a message is poison
	})
	if err != nil {
		log.Fatal(err)
	}
	handler := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		var p struct {
			Account string `json:"account"`
			Cents   int64  `json:"cents"`
		}
		if err := json.Unmarshal(msg.Data(), &p); err != nil || p.Account == "" {
			return inbox.Permanent(errors.Join(errors.New("malformed payment"), err))
		}
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, p.Cents, p.Account)
		return err // a connection error here is retried until the database is back
	}
	sub, err := natsinbox.New(ib, cons, handler, &natsinbox.Config{
		DeadLetterSubject: "PAYMENTS_DLQ.billing",
		JetStream:         js,
		MaxFailures:       5,
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
	time.Sleep(time.Second)
	_ = sub.Stop(ctx)
	log.Printf("%+v", sub.Stats())
}
