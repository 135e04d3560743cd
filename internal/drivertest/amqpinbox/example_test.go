package amqpinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
)

// A "ship order" message arrives twice (the producer republished after a
// lost confirm). The order is shipped once; both deliveries are acked.
//
// It needs RabbitMQ (IDEM_TEST_AMQP, default
// amqp://guest:guest@127.0.0.1:5672/), so it has no Output line and does not
// run under go test; TestExamples runs it against the test server and checks
// that it prints:
//
//	shipments: 1
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	dir, err := os.MkdirTemp("", "amqpinbox-example")
	if err != nil {
		log.Fatal(err)
	}
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE shipments (order_id TEXT)`); err != nil {
		log.Fatal(err)
	}

	url := os.Getenv("IDEM_TEST_AMQP")
	if url == "" {
		url = "amqp://guest:guest@127.0.0.1:5672/"
	}
	conn, err := amqp.Dial(url)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		log.Fatal(err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	queue := "example-shipping-" + hex.EncodeToString(b[:])
	if _, err := ch.QueueDeclare(queue, false, true, false, false, nil); err != nil {
		log.Fatal(err)
	}
	defer func() { _, _ = ch.QueueDelete(queue, false, false, false) }()

	sub, err := amqpinbox.New(ib, conn, func(ctx context.Context, tx *sql.Tx, d *amqp.Delivery) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, string(d.Body))
		return err
	}, &amqpinbox.Config{Queue: queue})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		log.Fatal(err)
	}
	for range 2 {
		if err := ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{MessageId: "ship-order-7", Body: []byte("order-7")}); err != nil {
			log.Fatal(err)
		}
	}
	for { // until both are delivered to the subscriber
		q, err := ch.QueueDeclarePassive(queue, false, true, false, false, nil)
		if err != nil {
			log.Fatal(err)
		}
		if q.Messages == 0 {
			break
		}
		if ctx.Err() != nil {
			log.Fatal("messages not delivered: ", ctx.Err())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Stop processes (and acks) what was delivered before it returns.
	if err := sub.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	var n int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM shipments`).Scan(&n)
	fmt.Println("shipments:", n)
}
