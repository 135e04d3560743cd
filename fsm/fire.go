package fsm

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/idemkit/idem/lock"
)

// Executor is what Fire needs from the database: *sql.DB, *sql.Tx and
// *sql.Conn all satisfy it. Pass the caller's *sql.Tx to make the transition
// part of a larger unit of work (the business change, an inbox record, an
// outbox message) that commits or rolls back as one.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Options refine one Fire call. A nil *Options means none.
type Options struct {
	// Version, when non-nil, adds "AND version = *Version" to the UPDATE:
	// the transition applies only to the row as the caller last saw it. This
	// closes the ABA hole where a row is moved on and the caller, acting on
	// an old read, would still find a source state. Zero is a version like
	// any other. A mismatch is ErrStaleVersion and is never retried by Fire.
	Version *int64

	// Set lists extra columns written by the same UPDATE (paid_at, tracking
	// number…). Keys are plain identifiers and must not be the id, status or
	// version column; values are bound as parameters. A duplicate or illegal
	// call writes none of them.
	Set map[string]any

	// Fence, when positive, makes the transition conditional on a fencing
	// token, normally the fence of a lock lease (lock.Lease.Fence): the
	// UPDATE also requires "fence column <= Fence" and writes Fence into it.
	// A holder whose lock was lost and taken by a newer holder (whose larger
	// fence is in the row) cannot move the row any more: Fire returns a
	// *lock.StaleFenceError (errors.Is lock.ErrStaleFence), whatever state
	// the row is in, and writes nothing. The same holder may fire several
	// transitions with one fence. Needs Config.FenceColumn. Zero means no
	// fence check (and the fence column is left as it is).
	Fence lock.Fence
}

// Outcome is how a successful Fire ended.
type Outcome int

const (
	// Applied: this call's UPDATE moved the row (rows affected = 1).
	Applied Outcome = iota + 1
	// Duplicate: the row was already in the target state, or in a state that
	// can only be reached through it. The transition happened before (a
	// retry, a redelivery); nothing was written. Treat it as success.
	Duplicate
)

func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	default:
		return fmt.Sprintf("Outcome(%d)", int(o))
	}
}

// Result is the row as Fire left it (Applied) or found it (Duplicate).
type Result struct {
	Outcome Outcome
	State   string // the row's state
	Version int64  // the row's version
}

// Fire runs the named transition on the row with this id.
//
// The decision is one statement, the conditional UPDATE
//
//	UPDATE table SET status = to, version = version + 1 [, Set…]
//	WHERE id = ? AND status IN (from…) [AND version = ?]
//
// and rows affected = 1 means Applied. When it matches nothing, one read
// classifies why (it decides nothing):
//
//   - row at the target state or beyond it: Duplicate, nil error;
//   - row still in a source state, Options.Version given and different:
//     a *StaleVersionError (ErrStaleVersion);
//   - row still in a source state otherwise: it moved between the two
//     statements; the UPDATE runs again, up to Config.MaxAttempts, then
//     ErrLostRace;
//   - row in any other state: an *IllegalTransitionError
//     (ErrIllegalTransition), after calling Config.OnIllegalFunc;
//   - no row: ErrNotFound.
//
// An unknown transition name is ErrUnknownTransition. Database errors are
// wrapped and returned as they are; on PostgreSQL an error aborts the
// caller's transaction, as any failed statement does.
func (m *Machine) Fire(ctx context.Context, db Executor, id any, transition string, opts *Options) (Result, error) {
	t, ok := m.transitions[transition]
	if !ok {
		return Result{}, fmt.Errorf("%w %q on table %s", ErrUnknownTransition, transition, m.table)
	}
	if opts == nil {
		opts = &Options{}
	}
	if opts.Fence > 0 && m.cfg.FenceColumn == "" {
		return Result{}, configError("Options.Fence", fmt.Sprintf("%d needs Config.FenceColumn (table %s has none configured)", opts.Fence, m.table))
	}
	query, args, err := m.updateSQL(t, id, opts)
	if err != nil {
		return Result{}, err
	}
	for attempt := 1; ; attempt++ {
		applied, version, err := m.update(ctx, db, query, args)
		if err != nil {
			return Result{}, fmt.Errorf("fsm: %s id %v: transition %q: %w", m.table, id, t.Name, err)
		}
		if applied {
			return Result{Outcome: Applied, State: t.To, Version: version}, nil
		}

		state, version, fence, err := m.read(ctx, db, id)
		if errors.Is(err, sql.ErrNoRows) {
			return Result{}, fmt.Errorf("%w: %s id %v (transition %q)", ErrNotFound, m.table, id, t.Name)
		}
		if err != nil {
			return Result{}, fmt.Errorf("fsm: %s id %v: classify transition %q: %w", m.table, id, t.Name, err)
		}
		if opts.Fence > 0 && fence > opts.Fence {
			// A newer holder has moved this row: whatever its state, this
			// caller's lease is gone. Not even a Duplicate: it must stop.
			return Result{}, fmt.Errorf("fsm: %s id %v: transition %q (row in state %q): %w",
				m.table, id, t.Name, state, &lock.StaleFenceError{Fence: opts.Fence, Current: fence})
		}
		switch m.classify(t, state) {
		case atOrBeyond:
			return Result{Outcome: Duplicate, State: state, Version: version}, nil
		case inSource:
			if opts.Version != nil && *opts.Version != version {
				return Result{}, &StaleVersionError{Table: m.table, ID: id, Transition: t.Name,
					Current: state, Expected: *opts.Version, Actual: version}
			}
			if attempt >= m.cfg.MaxAttempts {
				return Result{}, fmt.Errorf("%w: transition %q on %s id %v: %d attempts, row still in %q",
					ErrLostRace, t.Name, m.table, id, attempt, state)
			}
		default:
			ie := &IllegalTransitionError{Table: m.table, ID: id, Transition: t.Name,
				From: slices.Clone(t.From), To: t.To, Current: state, Version: version}
			if m.cfg.OnIllegalFunc != nil {
				m.cfg.OnIllegalFunc(ctx, ie)
			}
			return Result{}, ie
		}
	}
}

type class int

const (
	illegal class = iota
	atOrBeyond
	inSource
)

// classify places state relative to transition t. "Beyond" means dominated:
// every path from the initial state to state passes through t.To, so a row
// in state has been in t.To. A state merely reachable from t.To is not
// enough: CANCELLED is reachable from PAID but also straight from CREATED,
// so "pay" on a CANCELLED order is no proof that it was ever paid and is
// reported as illegal rather than answered with success.
func (m *Machine) classify(t Transition, state string) class {
	if state == t.To {
		return atOrBeyond
	}
	s, ok := m.index[state]
	if !ok {
		return illegal // a state the Definition does not know: data anomaly
	}
	if m.after[m.index[t.To]][s] {
		return atOrBeyond
	}
	if slices.Contains(t.From, state) {
		return inSource
	}
	return illegal
}

func (m *Machine) updateSQL(t Transition, id any, opts *Options) (string, []any, error) {
	d := m.dialect
	c := &m.cfg
	cols := make([]string, 0, len(opts.Set))
	for col := range opts.Set {
		if err := checkIdent("Options.Set", col, false); err != nil {
			return "", nil, err
		}
		// Unquoted identifiers are case-insensitive in every dialect: STATUS
		// is the status column. On MySQL and SQLite a second assignment to it
		// would win over Fire's and defeat the guard.
		for _, own := range []string{c.IDColumn, c.StatusColumn, c.VersionColumn, c.FenceColumn} {
			if own != "" && strings.EqualFold(col, own) {
				return "", nil, configError("Options.Set", fmt.Sprintf("must not write the %q column: Fire owns it", col))
			}
		}
		cols = append(cols, col)
	}
	slices.Sort(cols) // deterministic SQL text, friendly to statement caches
	if err := sameColumnTwice(cols); err != nil {
		return "", nil, err
	}

	args := make([]any, 0, 3+len(cols)+len(t.From))
	var b strings.Builder
	b.Grow(128)
	arg := func(v any) string {
		args = append(args, v)
		return d.Placeholder(len(args))
	}
	b.WriteString("UPDATE " + m.table + " SET " + c.StatusColumn + " = " + arg(t.To) + ", " + c.VersionColumn + " = ")
	if d == MySQL {
		// MySQL has no UPDATE … RETURNING; LAST_INSERT_ID(expr) hands the
		// new version back in the OK packet of the same statement.
		b.WriteString("LAST_INSERT_ID(" + c.VersionColumn + " + 1)")
	} else {
		b.WriteString(c.VersionColumn + " + 1")
	}
	if opts.Fence > 0 {
		b.WriteString(", " + c.FenceColumn + " = " + arg(int64(opts.Fence)))
	}
	for _, col := range cols {
		b.WriteString(", " + col + " = " + arg(opts.Set[col]))
	}
	b.WriteString(" WHERE " + c.IDColumn + " = " + arg(id) + " AND " + c.StatusColumn + " IN (")
	for i, f := range t.From {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(arg(f))
	}
	b.WriteString(")")
	if opts.Version != nil {
		b.WriteString(" AND " + c.VersionColumn + " = " + arg(*opts.Version))
	}
	if opts.Fence > 0 {
		b.WriteString(" AND " + c.FenceColumn + " <= " + arg(int64(opts.Fence)))
	}
	if d != MySQL {
		b.WriteString(" RETURNING " + c.VersionColumn)
	}
	return b.String(), args, nil
}

// update runs the conditional UPDATE: one statement.
func (m *Machine) update(ctx context.Context, db Executor, query string, args []any) (applied bool, version int64, err error) {
	if m.dialect != MySQL {
		err := db.QueryRowContext(ctx, query, args...).Scan(&version)
		if errors.Is(err, sql.ErrNoRows) {
			return false, 0, nil
		}
		return err == nil, version, err
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return false, 0, err
	}
	// Without clientFoundRows=true, MySQL counts changed rows, not matched
	// rows. The UPDATE always changes status and version, so the two are
	// equal here and 1 means applied whatever the DSN says.
	n, err := res.RowsAffected()
	if err != nil {
		return false, 0, err
	}
	switch n {
	case 0:
		return false, 0, nil
	case 1:
		v, err := res.LastInsertId()
		return err == nil, v, err
	default:
		return false, 0, fmt.Errorf("UPDATE matched %d rows: the %s column must be unique", n, m.cfg.IDColumn)
	}
}

// read fetches the row for classification. On MySQL it is a locking read:
// inside a REPEATABLE READ transaction a plain SELECT would see the
// transaction's old snapshot, while the UPDATE saw the latest row; the
// failed UPDATE already holds the row lock, so this adds no new waiting.
// With Config.FenceColumn it also reads the row's fence.
func (m *Machine) read(ctx context.Context, db Executor, id any) (state string, version int64, fence lock.Fence, err error) {
	c := &m.cfg
	cols := c.StatusColumn + ", " + c.VersionColumn
	if c.FenceColumn != "" {
		cols += ", " + c.FenceColumn
	}
	q := "SELECT " + cols + " FROM " + m.table + " WHERE " + c.IDColumn + " = " + m.dialect.Placeholder(1)
	if m.dialect == MySQL {
		q += " LOCK IN SHARE MODE"
	}
	if c.FenceColumn == "" {
		err = db.QueryRowContext(ctx, q, id).Scan(&state, &version)
		return state, version, 0, err
	}
	var f sql.NullInt64
	err = db.QueryRowContext(ctx, q, id).Scan(&state, &version, &f)
	return state, version, lock.Fence(f.Int64), err
}

// sameColumnTwice rejects two sorted keys that name one column (paid_at and
// PAID_AT): the database would assign it twice, or refuse.
func sameColumnTwice(cols []string) error {
	seen := make(map[string]string, len(cols))
	for _, col := range cols {
		k := strings.ToLower(col)
		if prev, ok := seen[k]; ok {
			return configError("Options.Set", fmt.Sprintf("names one column twice (%q and %q): identifiers are case-insensitive", prev, col))
		}
		seen[k] = col
	}
	return nil
}
