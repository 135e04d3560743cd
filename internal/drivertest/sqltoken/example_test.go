package sqltoken_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/idemkit/idem/onetime"
	"github.com/idemkit/idem/onetime/sqltoken"
)

// Create the table, issue and consume a token, and purge expired tokens
// (run Purge periodically, e.g. hourly).
func Example() {
	dir, _ := os.MkdirTemp("", "sqltoken")
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	store, err := sqltoken.New(db, &sqltoken.Config{Dialect: sqltoken.SQLite})
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	tokens, _ := onetime.New(store, &onetime.Config{TTL: 30 * time.Minute})
	tok, _ := tokens.Issue(ctx, "session:s-1")
	fmt.Println(tokens.Consume(ctx, "session:s-1", tok))
	purged, err := tokens.Purge(ctx, 24*time.Hour, 1000)
	fmt.Println(purged, err)
	// Output:
	// <nil>
	// 0 <nil>
}
