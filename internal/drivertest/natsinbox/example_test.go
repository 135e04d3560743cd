package natsinbox_test

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
)

// A payment event is published twice (the producer retried after a
// timeout). The subscriber records the payment once and acks both copies.
//
// It needs NATS with JetStream (IDEM_TEST_NATS, default
// nats://127.0.0.1:4222), so it has no Output line and does not run under go
// test; TestExamples runs it against the test server and checks that it
// prints:
//
//	messages acked: 2, payments recorded: 1
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The inbox lives in the service's own database; SQLite here.
	dir, err := os.MkdirTemp("", "natsinbox-example")
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE payments (payment_id TEXT, amount INTEGER)`); err != nil {
		log.Fatal(err)
	}

	// A stream and a durable pull consumer.
	nc, err := nats.Connect(envOr("IDEM_TEST_NATS", nats.DefaultURL))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	stream := "EXAMPLE_" + randomHex()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		log.Fatal(err)
	}
	defer func() { _ = js.DeleteStream(context.Background(), stream) }()
	cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "billing", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		log.Fatal(err)
	}

	sub, err := natsinbox.New(ib, cons, func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO payments (payment_id, amount) VALUES (?, ?)`,
			msg.Headers().Get("Payment-Id"), string(msg.Data()))
		return err
	}, &natsinbox.Config{MessageIDFunc: natsinbox.HeaderID("Payment-Id")})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		log.Fatal(err)
	}

	for range 2 { // the same payment, twice
		m := nats.NewMsg(stream + ".payments")
		m.Header.Set("Payment-Id", "pay-42")
		m.Data = []byte("1999")
		if _, err := js.PublishMsg(ctx, m); err != nil {
			log.Fatal(err)
		}
	}
	for { // until both copies are acked
		info, err := cons.Info(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if info.AckFloor.Stream == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := sub.Stop(ctx); err != nil {
		log.Fatal(err)
	}

	var n int
	_ = db.QueryRowContext(ctx, `SELECT count(*) FROM payments`).Scan(&n)
	fmt.Println("messages acked: 2, payments recorded:", n)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
