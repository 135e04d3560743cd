package pgxinbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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

// configError is the *idem.ConfigError of package pgxinbox.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "pgxinbox", Field: field, Reason: reason}
}
