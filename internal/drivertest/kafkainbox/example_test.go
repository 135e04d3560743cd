package kafkainbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
)

// A ledger consumer reads a payment event that the producer sent twice
// (same idem-message-id header): the account is credited once.
func Example() {
	ctx := context.Background()

	// An in-process Kafka cluster stands in for a real one here.
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "payments"))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	dir, _ := os.MkdirTemp("", "kafkainbox-example")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE ledger (payment_id TEXT, amount TEXT)`); err != nil {
		log.Fatal(err)
	}

	producer, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	payment := func() *kgo.Record {
		return &kgo.Record{Topic: "payments", Value: []byte("19.99"),
			Headers: []kgo.RecordHeader{{Key: kafkainbox.DefaultMessageIDHeader, Value: []byte("pay-42")}}}
	}
	if err := producer.ProduceSync(ctx, payment(), payment()).FirstErr(); err != nil {
		log.Fatal(err)
	}

	// watched reports each inbox decision, to show what happened.
	decisions := make(chan inbox.Outcome, 2)
	watched := watchedInbox{ib, decisions}
	sub, err := kafkainbox.New(watched, func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (payment_id, amount) VALUES (?, ?)`, "pay-42", string(r.Value))
		return err
	}, &kafkainbox.Config{Brokers: brokers, Group: "ledger", Topics: []string{"payments"}})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("first: ", <-decisions)
	fmt.Println("second:", <-decisions)
	if err := sub.Stop(ctx); err != nil { // commits the group's offset
		log.Fatal(err)
	}
	var n int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM ledger`).Scan(&n)
	fmt.Println("ledger entries:", n)
	fmt.Printf("%+v\n", sub.Stats()) // inbox.DeliveryStats, the same for every broker adapter
	// Output:
	// first:  processed
	// second: duplicate
	// ledger entries: 1
	// {Processed:1 Duplicates:1 Retried:0 DeadLettered:0 Parked:0}
}

type watchedInbox struct {
	*inbox.Inbox
	decisions chan<- inbox.Outcome
}

func (w watchedInbox) Process(ctx context.Context, consumer, id string, h inbox.Handler) (inbox.Outcome, error) {
	out, err := w.Inbox.Process(ctx, consumer, id, h)
	if err == nil {
		w.decisions <- out
	}
	return out, err
}
