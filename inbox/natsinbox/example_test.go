package natsinbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/natsinbox"
)

// A JetStream consumer whose handler runs once per message: the inbox row
// and the handler's writes commit together, redeliveries are acknowledged
// without running it, and failures are retried, then dead-lettered. It
// needs NATS with JetStream (NATS_URL, a stream with a durable consumer
// "billing"), a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program, so go test compiles it but does not
// run it.
func ExampleNew() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	nc, err := nats.Connect(os.Getenv("NATS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		log.Fatal(err)
	}
	cons, err := js.Consumer(ctx, "PAYMENTS", "billing")
	if err != nil {
		log.Fatal(err)
	}
	handle := func(ctx context.Context, tx *sql.Tx, msg jetstream.Msg) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 7`)
		return err
	}
	sub, err := natsinbox.New(ib, cons, handle, &natsinbox.Config{Consumer: "billing", JetStream: js, DeadLetterSubject: "payments.dead"})
	if err != nil {
		log.Fatal(err)
	}
	if err := sub.Start(ctx); err != nil {
		log.Fatal(err)
	}
	<-ctx.Done() // until SIGTERM
	if err := sub.Stop(context.Background()); err != nil {
		log.Print(err)
	}
}
