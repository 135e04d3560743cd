package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ErrNotFound is returned by Get, Requeue and Discard for an ID that has no
// row in the state they need.
var ErrNotFound = errors.New("outbox: no such message")

// Info describes a stored message, for operators.
type Info struct {
	ID          string
	Destination string
	OrderingKey string
	State       State
	Attempts    int
	Enqueued    time.Time // by the database clock
	Reason      string    // the last publish error (the parking reason)
}

func scanInfo(sc interface{ Scan(...any) error }) (Info, error) {
	var in Info
	var us int64
	err := sc.Scan(&in.ID, &in.Destination, &in.OrderingKey, &in.State, &in.Attempts, &us, &in.Reason)
	in.Enqueued = time.UnixMicro(us).UTC()
	return in, err
}

// Get returns the stored state of the message with id.
func (o *Outbox) Get(ctx context.Context, id string) (Info, error) {
	in, err := scanInfo(o.db.QueryRowContext(ctx, o.st.get, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	if err != nil {
		return Info{}, fmt.Errorf("outbox: get: %w", err)
	}
	return in, nil
}

// Parked lists up to limit parked messages, oldest first. A parked message
// holds back the later messages of its ordering key (never other keys)
// until an operator requeues or discards it.
func (o *Outbox) Parked(ctx context.Context, limit int) ([]Info, error) {
	rows, err := o.db.QueryContext(ctx, o.st.parked, limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: parked: %w", err)
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		in, err := scanInfo(rows)
		if err != nil {
			return nil, fmt.Errorf("outbox: parked: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("outbox: parked: %w", err)
	}
	return out, nil
}

// Requeue makes a parked message pending again (after the cause was fixed).
func (o *Outbox) Requeue(ctx context.Context, id string) error {
	return o.oneRow(ctx, o.st.requeue, id, "requeue")
}

// Discard gives up a pending or parked message: it is never published, and
// the next message of its ordering key may go. The sweeper deletes it
// after the retention.
func (o *Outbox) Discard(ctx context.Context, id string) error {
	return o.oneRow(ctx, o.st.discard, id, "discard")
}

func (o *Outbox) oneRow(ctx context.Context, query, id, what string) error {
	res, err := o.db.ExecContext(ctx, query, id)
	if err != nil {
		return fmt.Errorf("outbox: %s: %w", what, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("outbox: %s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q", ErrNotFound, id)
	}
	return nil
}
