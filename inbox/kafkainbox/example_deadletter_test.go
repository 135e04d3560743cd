package kafkainbox_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
)

// Poison goes to a dead-letter topic and the partition moves on; a record
// that can never be applied says so with inbox.Permanent. Failing reports
// partitions paused on a failing record. (Needs Kafka and PostgreSQL.)
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
	handler := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		if len(r.Value) == 0 {
			return inbox.Permanent(errors.New("empty payment event"))
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (event) VALUES ($1)`, r.Value)
		return err
	}
	sub, err := kafkainbox.New(ib, handler, &kafkainbox.Config{
		Brokers: []string{"127.0.0.1:9092"}, Group: "ledger", Topics: []string{"payments"},
		DeadLetterTopic: "payments-dlq",
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
	for _, f := range sub.Failing() {
		log.Printf("partition %s/%d stuck at offset %d after %d attempts: %v", f.Topic, f.Partition, f.Offset, f.Attempts, f.Err)
	}
	_ = sub.Stop(ctx)
}
