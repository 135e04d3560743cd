// Package pgxinbox lets package inbox join a pgx transaction (pgx.Tx from a
// *pgxpool.Pool or a *pgx.Conn), as inbox.Inbox.ProcessTx joins a *sql.Tx:
// the dedup row and the business change commit together, in the caller's
// transaction.
//
//	pool, _ := pgxpool.New(ctx, dsn)
//	ib, _ := inbox.New(stdlib.OpenDBFromPool(pool), &inbox.Config{Dialect: inbox.Postgres})
//	_ = ib.Migrate(ctx)
//
//	tx, _ := pool.Begin(ctx)
//	defer tx.Rollback(ctx)
//	out, err := pgxinbox.ProcessTx(ctx, ib, tx, "wallet", msg.ID, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `UPDATE wallet SET balance = balance + $1 WHERE id = $2`, amt, id)
//		return err
//	})
//	if err != nil {
//		return err // rolled back by the defer; the broker redelivers
//	}
//	if err := tx.Commit(ctx); err != nil { … }
//	// ack (Processed or Duplicate)
//
// # Sections
//
//   - ProcessTx: inbox.ProcessTx's contract for a pgx.Tx; the handler gets
//     the pgx.Tx.
//   - Execer: the adapter behind it (pgx.Tx → inbox.Execer), for
//     inbox.Inbox.ProcessIn when the handler has tx in scope already.
//   - ProcessBatch: a transaction of its own in two round trips: one
//     pgx.Batch with BEGIN, the dedup claim and the business statements
//     (a BatchHandler queues them), then COMMIT. The dedup row costs no
//     round trip: the same business transaction written with pgx.Begin,
//     one Exec and Commit takes three. Bloom prefilter, fast path and
//     retries are inbox.Process's (inbox.Inbox.ProcessEngine).
//
// # Guarantees
//
// ProcessTx: exactly those of inbox.ProcessTx: the engine decides (INSERT …
// ON CONFLICT DO NOTHING, rows affected), a duplicate never aborts the
// caller's transaction, a handler error must be followed by a rollback.
//
// ProcessBatch: the claim is a plain INSERT; a duplicate's unique
// violation aborts the transaction, and PostgreSQL executes none of the
// business statements queued after it (tested with a sequence, which no
// rollback undoes: a duplicate never advanced it). A concurrent delivery of
// the same message waits for the first one's row (tested with 8 goroutines
// delivering each of 20 messages: one effect each). A failing statement, a
// callback's error and a panic roll back the dedup row with the effect.
// A duplicate costs an error in the server log and pgx's re-preparing of
// the batch's statements on that connection.
// Rows written through *sql.DB (inbox.Process) and through pgx
// (ProcessTx) are the same rows: both paths deduplicate against each other.
//
// Not provided: handlers that need a statement's result before they can
// write the next one in ProcessBatch (a batch is sent at once; use
// ProcessTx), ProcessBatch with another isolation level than the
// server's default, and other databases than PostgreSQL.
package pgxinbox
