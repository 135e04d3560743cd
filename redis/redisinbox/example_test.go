package redisinbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/redis/go-redis/v9"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/redis/redisinbox"
)

// Redis in front of the inbox's table: a duplicate delivery of a message
// processed recently is answered by Redis, without a database round trip;
// the table stays the judge. It needs Redis (REDIS_URL), a PostgreSQL
// server (DATABASE_URL) and a database/sql driver registered as "pgx" by
// the program, so go test compiles it but does not run it.
func ExampleNew() {
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		log.Fatal(err)
	}
	opt.ContextTimeoutEnabled = true
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	fast, err := redisinbox.New(rdb, &redisinbox.Config{Prefix: "billing:inbox:"})
	if err != nil {
		log.Fatal(err)
	}
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.Postgres, FastPath: fast})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	if err := ib.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	out, err := ib.Process(ctx, "billing", "invoice-9/paid", func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE invoices SET paid = true WHERE id = 9`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(out)
}
