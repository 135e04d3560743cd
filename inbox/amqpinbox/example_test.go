package amqpinbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/rabbitmq/amqp091-go"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/amqpinbox"
)

// A RabbitMQ queue consumed with each message's handler run once: the
// inbox row and the handler's writes commit together, redeliveries are
// acknowledged without running it. It needs RabbitMQ (AMQP_URL, a queue
// "payments" carrying message IDs), a PostgreSQL server (DATABASE_URL) and
// a database/sql driver registered as "pgx" by the program, so go test
// compiles it but does not run it.
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
	conn, err := amqp091.Dial(os.Getenv("AMQP_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	handle := func(ctx context.Context, tx *sql.Tx, d *amqp091.Delivery) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 7`)
		return err
	}
	sub, err := amqpinbox.New(ib, conn, handle, &amqpinbox.Config{Queue: "payments", Consumer: "billing"})
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
