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
//
// # Guarantees
//
// Exactly those of inbox.ProcessTx: the engine decides (INSERT … ON
// CONFLICT DO NOTHING, rows affected), a duplicate never aborts the
// caller's transaction, a handler error must be followed by a rollback.
// Rows written through *sql.DB (inbox.Process) and through pgx
// (ProcessTx) are the same rows: both paths deduplicate against each other.
//
// Not provided: a transaction of its own (inbox.Process begins one through
// database/sql, with its fast path, Bloom prefilter and retries; with pgx,
// begin the transaction yourself and call ProcessTx), and other databases
// than PostgreSQL.
package pgxinbox
