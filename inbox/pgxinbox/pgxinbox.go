package pgxinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
)

// Handler does the business work of one message inside tx, the caller's pgx
// transaction that also holds the message's dedup row. It must not commit or
// roll back tx.
type Handler func(ctx context.Context, tx pgx.Tx) error

// ProcessTx is inbox.Inbox.ProcessTx for a pgx transaction: it inserts the
// dedup row through tx and, only if the message is new, runs h in tx. It
// never commits or rolls back tx.
//
//   - Processed: h ran in tx; the message counts as processed when the
//     caller commits tx.
//   - Duplicate: h did not run; tx is still usable (the insert uses ON
//     CONFLICT DO NOTHING, so a duplicate never aborts it).
//   - error: the caller MUST roll back tx. errors.Is(err, inbox.ErrHandler)
//     tells h's failure from the inbox's; either way the cause is wrapped.
//
// ib must be a PostgreSQL inbox over the same database (for example opened
// on the same pool with stdlib.OpenDBFromPool, which also serves Migrate).
func ProcessTx(ctx context.Context, ib *inbox.Inbox, tx pgx.Tx, consumer, messageID string, h Handler) (inbox.Outcome, error) {
	switch {
	case ib == nil:
		return 0, configError("ib", "nil *inbox.Inbox")
	case ib.Dialect() != inbox.Postgres:
		return 0, configError("ib", fmt.Sprintf("pgxinbox needs a PostgreSQL inbox, got %v", ib.Dialect()))
	case tx == nil:
		return 0, configError("tx", "nil")
	case h == nil:
		return 0, configError("h", "nil Handler")
	}
	return ib.ProcessIn(ctx, Execer(tx), consumer, messageID, func(ctx context.Context) error { return h(ctx, tx) })
}

// Execer adapts tx to inbox.Execer, for inbox.Inbox.ProcessIn.
func Execer(tx pgx.Tx) inbox.Execer { return execer{tx} }

type execer struct{ tx pgx.Tx }

func (e execer) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	tag, err := e.tx.Exec(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return result(tag.RowsAffected()), nil
}

type result int64

var errNoLastInsertID = errors.New("pgxinbox: LastInsertId is not supported by PostgreSQL")

func (r result) LastInsertId() (int64, error) { return 0, errNoLastInsertID }
func (r result) RowsAffected() (int64, error) { return int64(r), nil }

// BatchHandler queues the business statements of one message on b, after
// the dedup row's claim: they are sent in the same round trip. It must
// only queue (b.Queue); it must not queue BEGIN, COMMIT, ROLLBACK or
// SAVEPOINT statements. To look at a result, register a callback
// (b.Queue(…).Exec, .QueryRow, .Query): the callbacks run before the
// commit, and an error from one rolls the transaction back and is
// returned wrapped in inbox.ErrHandler, as is an error of a statement or
// of queue itself.
type BatchHandler func(b *pgx.Batch) error

// ProcessBatch processes one delivery in a transaction of its own on conn,
// like inbox.Inbox.Process (Bloom prefilter, fast path, retries, counters),
// in two round trips: one pgx.Batch holding BEGIN, the dedup row's claim
// and the statements queue adds, then COMMIT. The business transaction
// alone costs as many (BEGIN and the statements batched, then COMMIT) or
// more (pgx's Begin, each statement, Commit), so the dedup row adds no
// round trip.
//
// A duplicate never executes the business statements: the claim is a plain
// INSERT, and its unique violation aborts the transaction before them (the
// database skips every statement after an error in a batch; PostgreSQL
// refuses them in an aborted transaction anyway). ProcessBatch then rolls
// back and returns Duplicate. A concurrent delivery of the same message
// waits for the first one's row and is Duplicate if it committed.
//
// conn must not be in a transaction; with a pool, acquire a connection:
//
//	err := pool.AcquireFunc(ctx, func(c *pgxpool.Conn) error {
//		out, err = pgxinbox.ProcessBatch(ctx, ib, c.Conn(), consumer, id, queue)
//		return err
//	})
//
// The transaction has the server's default isolation level. If ctx ends
// or the rollback fails, pgx closes the connection (a pool discards it).
// ib must be a PostgreSQL inbox over the same database.
func ProcessBatch(ctx context.Context, ib *inbox.Inbox, conn *pgx.Conn, consumer, messageID string, queue BatchHandler) (inbox.Outcome, error) {
	switch {
	case ib == nil:
		return 0, configError("ib", "nil *inbox.Inbox")
	case ib.Dialect() != inbox.Postgres:
		return 0, configError("ib", fmt.Sprintf("pgxinbox needs a PostgreSQL inbox, got %v", ib.Dialect()))
	case conn == nil:
		return 0, configError("conn", "nil *pgx.Conn")
	case queue == nil:
		return 0, configError("queue", "nil BatchHandler")
	}
	table := ib.Table()
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		table = table[i+1:]
	}
	return ib.ProcessEngine(ctx, consumer, messageID, func(ctx context.Context, c inbox.Claim) (inbox.Outcome, error) {
		return runBatch(ctx, conn, table, c, queue)
	})
}

// runBatch is one attempt: BEGIN, claim, business statements in one batch;
// then COMMIT, or ROLLBACK after any failure.
func runBatch(ctx context.Context, conn *pgx.Conn, table string, c inbox.Claim, queue BatchHandler) (out inbox.Outcome, err error) {
	if st := conn.PgConn().TxStatus(); st != 'I' {
		return 0, configError("conn", fmt.Sprintf("is in a transaction (status %q): ProcessBatch runs its own", st))
	}
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(c.SQL, c.Args...)
	open := true // the transaction may be open: roll it back unless committed
	defer func() {
		if open {
			if rerr := rollback(ctx, conn); rerr != nil {
				err = errors.Join(err, rerr)
			}
		}
	}()
	if err := queue(b); err != nil {
		return 0, fmt.Errorf("%w: %w", inbox.ErrHandler, err)
	}
	br := conn.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		var pre pgx.ErrPreprocessingBatch
		if errors.As(err, &pre) {
			// Preparing or encoding a statement failed before anything ran:
			// ours are fixed, so it is one of queue's.
			return 0, fmt.Errorf("%w: %w", inbox.ErrHandler, err)
		}
		return 0, fmt.Errorf("pgxinbox: begin: %w", err)
	}
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close() // the same error; the statements after the claim were skipped
		if isDuplicate(err, table) {
			return inbox.Duplicate, nil
		}
		return 0, fmt.Errorf("pgxinbox: claim: %w", err)
	}
	if tag.RowsAffected() != 1 {
		_ = br.Close()
		return 0, fmt.Errorf("pgxinbox: claim: %d rows affected, want 1", tag.RowsAffected())
	}
	if err := br.Close(); err != nil {
		// A statement or a callback of the business work failed.
		return 0, fmt.Errorf("%w: %w", inbox.ErrHandler, err)
	}
	open = false
	tag, err = conn.Exec(ctx, "COMMIT")
	if err != nil {
		return 0, fmt.Errorf("pgxinbox: commit (outcome unknown, the redelivery will tell): %w", err)
	}
	if tag.String() != "COMMIT" {
		return 0, fmt.Errorf("pgxinbox: commit: the server answered %q", tag.String())
	}
	return inbox.Processed, nil
}

// isDuplicate: err is the claim's unique violation on the dedup table.
func isDuplicate(err error, table string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505" && pe.TableName == table
}

// rollback ends the attempt's transaction, also when ctx has ended; a
// connection that cannot roll back is closed (a pool discards it).
func rollback(ctx context.Context, conn *pgx.Conn) error {
	if conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return nil
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(rctx, "ROLLBACK"); err != nil {
		_ = conn.Close(rctx)
		return fmt.Errorf("pgxinbox: rollback: %w", err)
	}
	return nil
}

// configError is the *idem.ConfigError of package pgxinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "pgxinbox", Field: field, Reason: reason}
}
