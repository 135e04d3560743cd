package adaptertest

import (
	"context"
	"database/sql"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/outbox"
)

// EnqueueOrdered enqueues messages m-from … m-(to-1) to dest, ten to a
// transaction, over keys ordering keys (k0 … k<keys-1>); message j's
// payload is its rank within its key (j/keys + 1), so a consumer can check
// per-key order. from and to are multiples of ten.
func EnqueueOrdered(tb testing.TB, ctx context.Context, db *sql.DB, ob *outbox.Outbox, dest string, keys, from, to int) {
	tb.Helper()
	for i := from; i < to; i += 10 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			tb.Fatal(err)
		}
		for j := i; j < i+10; j++ {
			m := outbox.Message{ID: "m-" + strconv.Itoa(j), Destination: dest, OrderingKey: "k" + strconv.Itoa(j%keys), Payload: []byte(strconv.Itoa(j/keys + 1))}
			if err := ob.Enqueue(ctx, tx, m); err != nil {
				tb.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			tb.Fatal(err)
		}
	}
}

// WaitApplied waits until the effects table (one row per applied message,
// column message_id) holds n distinct messages, and fails at once when a
// message has more than one effect.
func WaitApplied(tb testing.TB, ctx context.Context, db *sql.DB, effects string, n int, timeout time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var rows, ids int
		if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT message_id) FROM `+effects).Scan(&rows, &ids); err != nil {
			tb.Fatal(err)
		}
		if rows != ids {
			tb.Fatalf("duplicate effect: %d effects for %d messages", rows, ids)
		}
		if ids == n {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting: %d of %d applied", ids, n)
		}
		time.Sleep(25 * time.Millisecond)
	}
}
