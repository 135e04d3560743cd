package watermark_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/watermark"
)

// Change events arrive out of order: an upsert carrying an older version
// than the row's is ignored, so the row keeps the newest state.
// It needs a PostgreSQL server (DATABASE_URL) and a database/sql driver
// registered as "pgx" by the program (github.com/jackc/pgx/v5/stdlib), so
// go test compiles it but does not run it.
func ExampleTable_Upsert() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	customers, err := watermark.New("customers", &watermark.Config{Dialect: inbox.Postgres})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	for _, ev := range []struct {
		version int64
		email   string
	}{{2, "new@example.com"}, {1, "old@example.com"}} {
		res, err := customers.Upsert(ctx, db, 7, ev.version, map[string]any{"email": ev.email})
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(ev.version, res)
	}
}
