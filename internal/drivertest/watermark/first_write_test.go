package watermark_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/inbox/watermark"
	"github.com/idemkit/idem/internal/sqlerr"
)

// TestConcurrentFirstWrites: for 120 new keys, four transactions write the
// first versions of the same key at once (LastWriterWins, versions 1–4 in
// any order; the row does not exist yet). On MariaDB the update-then-insert
// order used to deadlock (1213) in most tries: the UPDATE of a missing row
// takes a gap lock in every transaction, and each INSERT then waits for the
// others' gap locks. No try may fail, and every key must end at version 4.
func TestConcurrentFirstWrites(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			db, wm, table := setup(t, b, watermark.LastWriterWins)
			ctx := ctxT(t)
			const keys, writers = 120, 4
			var failed, retryable atomic.Int64
			for k := range keys {
				key := fmt.Sprint("acc-", k)
				start := make(chan struct{})
				var wg sync.WaitGroup
				for w := range writers {
					v := int64(w + 1)
					wg.Go(func() {
						<-start
						if err := writeOnce(ctx, db, wm, key, v); err != nil {
							failed.Add(1)
							if sqlerr.IsRetryable(err) {
								retryable.Add(1)
							}
							t.Errorf("%s v%d: %v", key, v, err)
						}
					})
				}
				close(start)
				wg.Wait()
				if t.Failed() {
					break
				}
			}
			if n := failed.Load(); n > 0 {
				t.Fatalf("%d first writes failed (%d deadlocks or serialization failures)", n, retryable.Load())
			}
			var wrong int
			q := `SELECT COUNT(*) FROM ` + table + ` WHERE version <> 4 OR balance <> 40`
			if err := db.QueryRowContext(ctx, q).Scan(&wrong); err != nil {
				t.Fatal(err)
			}
			if wrong != 0 {
				t.Fatalf("%d keys did not end at version 4", wrong)
			}
		})
	}
}

func writeOnce(ctx context.Context, db *sql.DB, wm *watermark.Table, key string, v int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := wm.Upsert(ctx, tx, key, v, map[string]any{"balance": v * 10}); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

var _ = inbox.Postgres
