package lock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/idemkit/idem/internal/sqldialect"
)

// DB is what FencedTable needs from a database handle. *sql.DB, *sql.Conn
// and *sql.Tx satisfy it; pass the *sql.Tx to make the fenced write part of
// the caller's transaction.
type DB interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Placeholders selects the bind-parameter syntax of the SQL that
// FencedTable writes.
type Placeholders int

const (
	// Dollar numbers parameters $1, $2, … (PostgreSQL).
	Dollar Placeholders = iota
	// Question marks parameters with ? (MySQL, MariaDB, SQLite).
	Question
)

// FencedTable is the storage side of fencing: a table whose rows remember
// the fence of their last writer, so that a holder whose lease was lost (it
// paused, its lock expired, a newer holder wrote) cannot overwrite newer data.
//
// The table needs one extra column, e.g. "fence BIGINT NOT NULL DEFAULT 0".
// Update is one conditional UPDATE: the database, not Go code, decides.
//
// Table, KeyColumn and FenceColumn are written into the SQL as given: they
// must come from your code, never from input.
type FencedTable struct {
	Table        string       // table name, e.g. "accounts"
	KeyColumn    string       // primary key column, e.g. "id"
	FenceColumn  string       // fence column; "" means "fence"
	Placeholders Placeholders // Dollar (PostgreSQL, the zero value) or Question

	// Strict refuses a write whose fence equals the stored one. By default a
	// holder may write the same row several times under one lease (the check
	// is stored <= new, as in Kleppmann's fencing); Strict makes it
	// stored < new, i.e. one write per row per lease.
	Strict bool
}

// Update runs
//
//	UPDATE table SET <set>, fence = <fence> WHERE key = <key> AND fence <= <fence>
//
// and returns nil if the row was written. set is the caller's assignment list
// ("" to write only the fence) using args as its parameters, numbered from $1
// with Dollar placeholders. If the row carries a newer fence, Update returns a
// *StaleFenceError (errors.Is(err, ErrStaleFence)); if there is no such row,
// an error wrapping sql.ErrNoRows.
//
// With MySQL/MariaDB, open the pool with clientFoundRows=true: otherwise a
// write that changes nothing reports 0 rows and Update reports an error
// although nothing is wrong.
func (t FencedTable) Update(ctx context.Context, db DB, key any, fence Fence, set string, args ...any) error {
	if err := t.validate(); err != nil {
		return err
	}
	if db == nil {
		return configError("db", "nil")
	}
	if fence == 0 {
		return fmt.Errorf("lock: FencedTable.Update of %s: fence %d is not a fence (the lease has none?)", t.Table, fence)
	}
	col := t.fenceColumn()
	op := "<="
	if t.Strict {
		op = "<"
	}
	var b strings.Builder
	b.WriteString("UPDATE " + t.Table + " SET ")
	if s := strings.TrimSpace(set); s != "" {
		b.WriteString(s + ", ")
	}
	all := append(append(make([]any, 0, len(args)+3), args...), int64(fence), key)
	if t.Placeholders == Dollar {
		f, k := "$"+strconv.Itoa(len(args)+1), "$"+strconv.Itoa(len(args)+2)
		b.WriteString(col + " = " + f + " WHERE " + t.KeyColumn + " = " + k + " AND " + col + " " + op + " " + f)
	} else {
		b.WriteString(col + " = ? WHERE " + t.KeyColumn + " = ? AND " + col + " " + op + " ?")
		all = append(all, int64(fence))
	}
	res, err := db.ExecContext(ctx, b.String(), all...)
	if err != nil {
		return fmt.Errorf("lock: fenced update of %s: %w", t.Table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("lock: fenced update of %s: rows affected: %w", t.Table, err)
	}
	if n > 0 {
		return nil
	}
	// The UPDATE decided: nothing was written. Read the row only to say why.
	var current int64
	q := "SELECT " + col + " FROM " + t.Table + " WHERE " + t.KeyColumn + " = " + t.param(1)
	switch err := db.QueryRowContext(ctx, q, key).Scan(&current); {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("lock: fenced update of %s: no such row: %w", t.Table, sql.ErrNoRows)
	case err != nil:
		return fmt.Errorf("lock: fenced update of %s: nothing written; reading the row's fence: %w", t.Table, err)
	case Fence(current) > fence || (t.Strict && Fence(current) == fence):
		return &StaleFenceError{Fence: fence, Current: Fence(current)}
	default:
		return fmt.Errorf("lock: fenced update of %s matched no row, yet the row now carries fence %d (writer's %d): "+
			"it was inserted concurrently, or the driver counts changed rather than matched rows "+
			"(MySQL: set clientFoundRows=true): %w", t.Table, current, fence, sql.ErrNoRows)
	}
}

func (t FencedTable) fenceColumn() string {
	if t.FenceColumn == "" {
		return "fence"
	}
	return t.FenceColumn
}

func (t FencedTable) param(i int) string {
	if t.Placeholders == Dollar {
		return "$" + strconv.Itoa(i)
	}
	return "?"
}

// validate checks the names with the library's one identifier checker
// (sqldialect.CheckIdent, as fsm, optlock and the stores do): a plain
// identifier, the table optionally schema-qualified. Unquoted identifiers are
// case-insensitive, so the key and fence columns must differ ignoring case.
func (t FencedTable) validate() error {
	for _, f := range []struct {
		what, v   string
		qualified bool
	}{
		{"Table", t.Table, true}, {"KeyColumn", t.KeyColumn, false}, {"FenceColumn", t.fenceColumn(), false},
	} {
		if err := sqldialect.CheckIdent(f.v, f.qualified); err != nil {
			return configError("FencedTable."+f.what, err.Error())
		}
	}
	if strings.EqualFold(t.KeyColumn, t.fenceColumn()) {
		return configError("FencedTable.FenceColumn", fmt.Sprintf("is KeyColumn (%q): they must be two columns", t.KeyColumn))
	}
	if t.Placeholders != Dollar && t.Placeholders != Question {
		return configError("FencedTable.Placeholders", fmt.Sprintf("unknown style %d (Dollar or Question)", t.Placeholders))
	}
	return nil
}
