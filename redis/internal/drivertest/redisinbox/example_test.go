package redisinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/redis/redisinbox"
)

// Redis in front of the dedup table: a duplicate of a committed message is
// answered by one Redis round trip. The database stays the judge.
//
// It needs a Redis server (IDEM_TEST_REDIS, default
// redis://127.0.0.1:6379/0), so it has no Output line and does not run under
// go test; TestExamples runs it against the test server and checks that it
// prints:
//
//	processed <nil>
//	duplicate <nil>
//	duplicate <nil>
//	answered by Redis: 2
func Example() {
	ctx := context.Background()
	url := os.Getenv("IDEM_TEST_REDIS")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	var b [6]byte
	_, _ = rand.Read(b[:])
	prefix := "idem:example:" + hex.EncodeToString(b[:]) + ":"

	fast, err := redisinbox.New(rdb, &redisinbox.Config{
		Prefix:  prefix,
		DoneTTL: 7 * 24 * time.Hour, // cover the duplicate window
		// Timeout bounds each Redis call (200ms by default); a call over it
		// falls back to the database. This example is also run by a test
		// on a busy machine, where 200ms is not always enough for the
		// first call (it dials).
		Timeout: time.Second,
	})
	if err != nil {
		panic(err)
	}

	dir, err := os.MkdirTemp("", "redisinbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "app.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ib, err := inbox.New(db, &inbox.Config{Dialect: inbox.SQLite, FastPath: fast})
	if err != nil {
		panic(err)
	}
	if err := ib.Migrate(ctx); err != nil {
		panic(err)
	}

	for range 3 {
		out, err := ib.Process(ctx, "notifier", "msg-1", func(context.Context, *sql.Tx) error { return nil })
		fmt.Println(out, err)
	}
	fmt.Println("answered by Redis:", ib.Stats().FastPathDuplicates)

	if keys, _ := rdb.Keys(ctx, prefix+"*").Result(); len(keys) > 0 {
		rdb.Del(ctx, keys...)
	}
}
