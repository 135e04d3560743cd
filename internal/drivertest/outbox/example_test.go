package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/outbox"
)

// printer is a Publisher that "confirms" by printing.
type printer struct{}

func (printer) Publish(_ context.Context, batch []outbox.Message) []error {
	for _, m := range batch {
		fmt.Printf("publish %s to %s: %s\n", m.ID, m.Destination, m.Payload)
	}
	return make([]error, len(batch))
}

// The message commits with the business change; the relay publishes it
// afterwards. A rolled-back transaction publishes nothing.
func Example() {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(tempDir(), "shop.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	ob, err := outbox.New(db, &outbox.Config{Dialect: outbox.SQLite})
	if err != nil {
		panic(err)
	}
	if err := ob.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id TEXT PRIMARY KEY, status TEXT)`); err != nil {
		panic(err)
	}

	pay := func(order string, commit bool) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			panic(err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO orders VALUES (?, 'PAID')`, order); err != nil {
			panic(err)
		}
		m := outbox.Message{ID: order + "/paid", Destination: "shipping", OrderingKey: order, Payload: []byte("ship " + order)}
		if err := ob.Enqueue(ctx, tx, m); err != nil {
			panic(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			panic(err)
		}
	}
	pay("order-1", true)
	pay("order-2", false)

	relay, err := ob.NewRelay(printer{}, nil)
	if err != nil {
		panic(err)
	}
	n, err := relay.RunOnce(ctx)
	fmt.Println("claimed", n, err)
	in, _ := ob.Get(ctx, "order-1/paid")
	fmt.Println(in.State)
	// Output:
	// publish order-1/paid to shipping: ship order-1
	// claimed 1 <nil>
	// sent
}
