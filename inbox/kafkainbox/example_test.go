package kafkainbox_test

import (
	"context"
	"database/sql"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/kafkainbox"
)

// A Kafka consumer group whose handler runs once per record: the inbox
// row and the handler's writes commit together, and a record seen again
// after a rebalance is skipped. It needs Kafka (KAFKA_BROKERS, records
// carrying the idem-message-id header), a PostgreSQL server
// (DATABASE_URL) and a database/sql driver registered as "pgx" by the
// program, so go test compiles it but does not run it.
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
	handle := func(ctx context.Context, tx *sql.Tx, r *kgo.Record) error {
		_, err := tx.ExecContext(ctx, `UPDATE accounts SET balance = balance + 10 WHERE id = 7`)
		return err
	}
	sub, err := kafkainbox.New(ib, handle, &kafkainbox.Config{
		Brokers:  strings.Split(os.Getenv("KAFKA_BROKERS"), ","),
		Group:    "billing",
		Topics:   []string{"payments"},
		Consumer: "billing",
	})
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
