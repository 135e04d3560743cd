package kafkaoutbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/outbox"
	"github.com/idemkit/idem/outbox/kafkaoutbox"
)

// A service that marks an order paid and tells Kafka: the event is written
// in the order's transaction, and a relay produces it to the topic
// "orders.paid", keyed by the order (one partition, commit order), once it
// has committed, marking it sent on the broker's acknowledgement.
// It needs a PostgreSQL server (DATABASE_URL), a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib) and
// a Kafka broker (KAFKA_BROKER, host:port), so go test compiles it but
// does not run it.
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

	// The caller owns the client. Keep franz-go's defaults of an
	// idempotent producer with acks from all in-sync replicas (no
	// kgo.DisableIdempotentWrite): the broker then drops the client's own
	// retries, and the consumer's inbox drops the relay's.
	cl, err := kgo.NewClient(kgo.SeedBrokers(os.Getenv("KAFKA_BROKER")))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	pub, err := kafkaoutbox.New(cl)
	if err != nil {
		log.Fatal(err)
	}
	relay, err := ob.NewRelay(pub, &outbox.RelayConfig{PublishTimeout: 5 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		// Let the passes in hand finish, so their records are marked sent
		// (before the deferred cl.Close, which runs after this).
		stopCtx, done := context.WithTimeout(context.Background(), 30*time.Second)
		defer done()
		if err := relay.Stop(stopCtx); err != nil {
			log.Print(err)
		}
	}()

	// The business transaction: the update and its event commit together
	// or not at all. The ID (sent in the idem-message-id header) is
	// derived from the action, so a retried transaction enqueues the same
	// ID and kafkainbox applies it once.
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
		Destination: "orders.paid", // the topic
		OrderingKey: "order-42",    // the record key
		Payload:     []byte(`{"id":42}`),
	}); err != nil {
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		log.Fatal(err)
	}

	<-ctx.Done() // serve until interrupted; the deferred Stop drains the relay
}
