package adaptertest

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
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

// StallTimeout is how long a waiter lets a pipeline make no progress at
// all before it fails: under heavy load (a CPU hog and other builds at load
// 30) a consumer can take minutes for a few thousand messages, yet it
// still applies some every few seconds.
const StallTimeout = 90 * time.Second

// WaitProgress polls step every 25 ms until it reports done, and returns
// the longest time the progress count stood still. It fails only when the
// count step returns has not changed for stall: a slow pipeline that keeps
// moving is waited for, a stuck one is reported. On failure the message
// carries explain's text (the state of what is missing), when explain is
// not nil.
func WaitProgress(tb testing.TB, what string, stall time.Duration, step func() (progress int, done bool), explain func() string) (longest time.Duration) {
	tb.Helper()
	last, since := -1, time.Now()
	for {
		progress, done := step()
		if still := time.Since(since); progress != last || done {
			longest = max(longest, still)
			last, since = progress, time.Now()
		} else if still > stall {
			var why string
			if explain != nil {
				why = "\n" + explain()
			}
			tb.Fatalf("gave up waiting for %s: no progress for %v (at %d)%s", what, stall, progress, why)
		}
		if done {
			return longest
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// WaitApplied waits until the effects table (one row per applied message,
// column message_id) holds the n messages m-0 … m-(n-1) of EnqueueOrdered,
// and fails at once when a message has more than one effect. It fails
// when no message was applied for stall, naming the messages still
// missing.
func WaitApplied(tb testing.TB, ctx context.Context, db *sql.DB, effects string, n int, stall time.Duration) {
	tb.Helper()
	WaitProgress(tb, strconv.Itoa(n)+" messages applied", stall, func() (int, bool) {
		ids := CountEffects(tb, ctx, db, effects)
		return ids, ids == n
	}, func() string {
		return "missing: " + strings.Join(MissingEffects(tb, ctx, db, effects, n), " ")
	})
}

// CountEffects returns how many distinct messages the effects table holds,
// and fails at once when one of them has more than one effect.
func CountEffects(tb testing.TB, ctx context.Context, db *sql.DB, effects string) int {
	tb.Helper()
	var rows, ids int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*), COUNT(DISTINCT message_id) FROM `+effects).Scan(&rows, &ids); err != nil {
		tb.Fatal(err)
	}
	if rows != ids {
		tb.Fatalf("duplicate effect: %d effects for %d messages", rows, ids)
	}
	return ids
}

// MissingEffects lists which of m-0 … m-(n-1) have no row in the effects
// table, in order.
func MissingEffects(tb testing.TB, ctx context.Context, db *sql.DB, effects string, n int) []string {
	tb.Helper()
	rows, err := db.QueryContext(ctx, `SELECT DISTINCT message_id FROM `+effects)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	seen := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			tb.Fatal(err)
		}
		seen[id] = true
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	var missing []string
	for j := range n {
		if id := "m-" + strconv.Itoa(j); !seen[id] {
			missing = append(missing, id)
		}
	}
	return missing
}
