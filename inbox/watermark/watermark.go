package watermark

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/inbox"
	"github.com/idemkit/idem/internal/sqldialect"
)

// Result is what applying one versioned event did.
type Result uint8

const (
	// Applied: the row now holds the event's version.
	Applied Result = iota + 1
	// Stale: the row already holds a newer version; nothing was written.
	Stale
	// Duplicate: the row already holds exactly this version; nothing was written.
	Duplicate
)

// String returns "applied", "stale" or "duplicate".
func (r Result) String() string {
	switch r {
	case Applied:
		return "applied"
	case Stale:
		return "stale"
	case Duplicate:
		return "duplicate"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}

var (
	// ErrGap is returned in Strict mode when the event's predecessor has not
	// been applied yet (the row is missing or holds an older version than
	// v-1). Nothing was written. Return it from the inbox Handler: it wraps
	// inbox.ErrNotYet, so inbox.Process rolls back, parks the event (waits
	// and runs it again, a bounded number of times, counted in
	// inbox.Stats.EarlyRetries) and, if the predecessor still has not come,
	// returns it for the broker to redeliver later. A gap is never poison.
	ErrGap error = gapError{}
	// ErrInvalid is returned by Upsert and Delete for an argument that can
	// never be applied (version 0, a nil key, a set naming the key,
	// version or deleted column). New reports bad configuration with a
	// *idem.ConfigError instead.
	ErrInvalid = errors.New("watermark: invalid")
)

type gapError struct{}

func (gapError) Error() string { return "watermark: version gap" }
func (gapError) Unwrap() error { return inbox.ErrNotYet }

// Mode chooses how versions are applied.
type Mode uint8

const (
	// LastWriterWins applies an event when its version is greater than the
	// row's: later versions may skip earlier ones (v7 may follow v5).
	LastWriterWins Mode = iota
	// Strict applies version v only on top of v-1 (or v = 1 on a missing
	// row); anything else is a gap, a duplicate or stale.
	Strict
)

// Config names the entity table's columns. Zero fields take their defaults.
type Config struct {
	Dialect       inbox.Dialect // required
	KeyColumn     string        // primary key (or unique) column, default "id"
	VersionColumn string        // integer version, default "version"
	DeletedColumn string        // boolean tombstone flag, default "deleted"
	Mode          Mode
}

// Table applies versioned events to one entity table. The table needs a
// unique key column, an integer version column and a boolean deleted column;
// other columns a tombstone insert leaves out must be nullable or have
// defaults. A Table is safe for concurrent use.
type Table struct {
	d     inbox.Dialect
	table string
	cfg   Config
	read  string
}

// New returns a Table for the entity table named table ("name" or
// "schema.name" outside SQLite).
func New(table string, cfg *Config) (*Table, error) {
	if cfg == nil {
		return nil, configError("Config.Dialect", "required (a nil *Config has none)")
	}
	c := *cfg
	if c.KeyColumn == "" {
		c.KeyColumn = "id"
	}
	if c.VersionColumn == "" {
		c.VersionColumn = "version"
	}
	if c.DeletedColumn == "" {
		c.DeletedColumn = "deleted"
	}
	if !c.Dialect.Valid() {
		return nil, configError("Config.Dialect", fmt.Sprintf("required (inbox.Postgres, inbox.MySQL or inbox.SQLite), got %v", c.Dialect))
	}
	if c.Mode > Strict {
		return nil, configError("Config.Mode", fmt.Sprintf("unknown mode %d", c.Mode))
	}
	if err := sqldialect.CheckIdent(table, c.Dialect != inbox.SQLite); err != nil {
		return nil, configError("table", err.Error())
	}
	for _, col := range []struct{ field, name string }{
		{"Config.KeyColumn", c.KeyColumn}, {"Config.VersionColumn", c.VersionColumn}, {"Config.DeletedColumn", c.DeletedColumn},
	} {
		if err := sqldialect.CheckIdent(col.name, false); err != nil {
			return nil, configError(col.field, err.Error())
		}
	}
	t := &Table{d: c.Dialect, table: table, cfg: c}
	t.read = `SELECT ` + c.VersionColumn + `, ` + c.DeletedColumn + ` FROM ` + table +
		` WHERE ` + c.KeyColumn + ` = ` + t.ph(1)
	if c.Dialect != inbox.SQLite { // SQLite has one writer: the read is current anyway
		t.read += ` FOR UPDATE`
	}
	return t, nil
}

func (t *Table) ph(n int) string { return t.d.Placeholder(n) }

// Querier is what Table needs: *sql.Tx (the inbox Handler's transaction),
// *sql.Conn or *sql.DB.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Upsert applies the event "entity key is now set, at version": it writes the
// columns in set (name → value), the version and deleted = false, if the
// version is acceptable (see Mode); a missing row is inserted. A row with a
// newer version — including a tombstone — is left alone (Stale), so a late
// update never resurrects a deleted row; only a newer version does.
func (t *Table) Upsert(ctx context.Context, q Querier, key any, version int64, set map[string]any) (Result, error) {
	cols := make([]string, 0, len(set))
	for c := range set {
		if err := sqldialect.CheckIdent(c, false); err != nil {
			return 0, fmt.Errorf("%w: column: %w", ErrInvalid, err)
		}
		if c == t.cfg.KeyColumn || c == t.cfg.VersionColumn || c == t.cfg.DeletedColumn {
			return 0, fmt.Errorf("%w: set may not name the key, version or deleted column %q", ErrInvalid, c)
		}
		cols = append(cols, c)
	}
	sort.Strings(cols)
	vals := make([]any, len(cols))
	for i, c := range cols {
		vals[i] = set[c]
	}
	return t.apply(ctx, q, key, version, false, cols, vals)
}

// Delete applies the event "entity key was deleted, at version": it keeps
// the row as a tombstone (deleted = true, with the version) instead of
// removing it, so that a late update with an older version stays Stale. A
// missing row gets a tombstone inserted.
func (t *Table) Delete(ctx context.Context, q Querier, key any, version int64) (Result, error) {
	return t.apply(ctx, q, key, version, true, nil, nil)
}

// State returns the row's version and tombstone flag; found is false when
// there is no row.
func (t *Table) State(ctx context.Context, q Querier, key any) (version int64, deleted, found bool, err error) {
	query := `SELECT ` + t.cfg.VersionColumn + `, ` + t.cfg.DeletedColumn + ` FROM ` + t.table + ` WHERE ` + t.cfg.KeyColumn + ` = ` + t.ph(1)
	err = q.QueryRowContext(ctx, query, key).Scan(&version, &deleted)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, false, nil
	}
	if err != nil {
		return 0, false, false, fmt.Errorf("watermark: read %s: %w", t.table, err)
	}
	return version, deleted, true, nil
}

// maxRounds bounds the update → insert → read loop. A round only repeats when
// a concurrent transaction inserted the row between our update and our
// insert; the next update then sees it.
const maxRounds = 5

func (t *Table) apply(ctx context.Context, q Querier, key any, version int64, deleted bool, cols []string, vals []any) (Result, error) {
	if version < 1 {
		return 0, fmt.Errorf("%w: version %d (versions start at 1)", ErrInvalid, version)
	}
	if key == nil {
		return 0, fmt.Errorf("%w: key is nil", ErrInvalid)
	}
	strict := t.cfg.Mode == Strict
	mayInsert := !strict || version == 1 // LWW: any version; Strict: only version 1
	mayUpdate := !strict || version > 1
	for range maxRounds {
		// MySQL/MariaDB: insert first. Under REPEATABLE READ an UPDATE (or a
		// locking read) of a missing key takes a gap lock, gap locks of
		// several transactions coexist, and each one's INSERT then waits for
		// the others': concurrent first writes of one key deadlock (1213).
		// An INSERT … ON DUPLICATE KEY UPDATE of the key takes an exclusive
		// lock on the row (its own new one, or the existing one, waiting for
		// its writer), so concurrent first writes queue instead.
		if t.d == inbox.MySQL && mayInsert {
			ok, err := t.insert(ctx, q, key, version, deleted, cols, vals)
			if err != nil {
				return 0, err
			}
			if ok {
				return Applied, nil
			}
		}
		// 1. Conditional update of an existing row: the engine decides.
		if mayUpdate {
			ok, err := t.update(ctx, q, key, version, deleted, cols, vals, strict)
			if err != nil {
				return 0, err
			}
			if ok {
				return Applied, nil
			}
		}
		// 2. Insert if absent (PostgreSQL, SQLite: ON CONFLICT DO NOTHING
		// waits for a concurrent inserter, no gap locks).
		if t.d != inbox.MySQL && mayInsert {
			ok, err := t.insert(ctx, q, key, version, deleted, cols, vals)
			if err != nil {
				return 0, err
			}
			if ok {
				return Applied, nil
			}
		}
		// 3. Nothing written: a locking read of the row tells why.
		var cur int64
		var curDeleted bool
		err := q.QueryRowContext(ctx, t.read, key).Scan(&cur, &curDeleted)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			if strict && version > 1 {
				return 0, fmt.Errorf("%w: %s %v does not exist yet, event has version %d", ErrGap, t.table, key, version)
			}
			// Insert ignored but no row: another unique constraint refused it.
			return 0, fmt.Errorf("watermark: insert into %s was ignored but no row has key %v (another unique constraint?)", t.table, key)
		case err != nil:
			return 0, fmt.Errorf("watermark: read %s: %w", t.table, err)
		case cur == version:
			return Duplicate, nil
		case cur > version:
			return Stale, nil
		case strict && cur < version-1:
			return 0, fmt.Errorf("%w: %s %v is at version %d, event has version %d", ErrGap, t.table, key, cur, version)
		}
		// cur < version (LWW) or cur == version-1 (Strict): the row appeared
		// or advanced after our update; go round again.
	}
	return 0, fmt.Errorf("watermark: %s %v: version kept moving under concurrent writers after %d rounds", t.table, key, maxRounds)
}

func (t *Table) update(ctx context.Context, q Querier, key any, version int64, deleted bool, cols []string, vals []any, strict bool) (bool, error) {
	var b strings.Builder
	args := make([]any, 0, len(cols)+4)
	b.WriteString(`UPDATE ` + t.table + ` SET `)
	for i, c := range cols {
		args = append(args, vals[i])
		b.WriteString(c + ` = ` + t.ph(len(args)) + `, `)
	}
	args = append(args, deleted)
	b.WriteString(t.cfg.DeletedColumn + ` = ` + t.ph(len(args)) + `, `)
	// The version is assigned last: MySQL evaluates SET left to right.
	args = append(args, version)
	b.WriteString(t.cfg.VersionColumn + ` = ` + t.ph(len(args)))
	args = append(args, key)
	b.WriteString(` WHERE ` + t.cfg.KeyColumn + ` = ` + t.ph(len(args)))
	if strict {
		args = append(args, version-1)
		b.WriteString(` AND ` + t.cfg.VersionColumn + ` = ` + t.ph(len(args)))
	} else {
		args = append(args, version)
		b.WriteString(` AND ` + t.cfg.VersionColumn + ` < ` + t.ph(len(args)))
	}
	res, err := q.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return false, fmt.Errorf("watermark: update %s: %w", t.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("watermark: update %s: rows affected: %w", t.table, err)
	}
	return n == 1, nil
}

// insert adds the row unless its key exists. PostgreSQL and SQLite use
// ON CONFLICT (key) DO NOTHING. MySQL uses ON DUPLICATE KEY UPDATE key = key
// (not INSERT IGNORE, which would also turn bad data into silent
// truncation): 1 row affected means inserted, 0 means present — which holds
// only with the driver's default clientFoundRows=false.
func (t *Table) insert(ctx context.Context, q Querier, key any, version int64, deleted bool, cols []string, vals []any) (bool, error) {
	all := append([]string{t.cfg.KeyColumn, t.cfg.VersionColumn, t.cfg.DeletedColumn}, cols...)
	args := append([]any{key, version, deleted}, vals...)
	marks := make([]string, len(all))
	for i := range marks {
		marks[i] = t.ph(i + 1)
	}
	query := `INSERT INTO ` + t.table + ` (` + strings.Join(all, ", ") + `) VALUES (` + strings.Join(marks, ", ") + `)`
	if t.d == inbox.MySQL {
		query += ` ON DUPLICATE KEY UPDATE ` + t.cfg.KeyColumn + ` = ` + t.cfg.KeyColumn
	} else {
		query += ` ON CONFLICT (` + t.cfg.KeyColumn + `) DO NOTHING`
	}
	res, err := q.ExecContext(ctx, query, args...)
	if err != nil {
		return false, fmt.Errorf("watermark: insert into %s: %w", t.table, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return false, fmt.Errorf("watermark: insert into %s: rows affected: %w", t.table, err)
	}
	return n == 1, nil
}

// configError is the *idem.ConfigError of package watermark.
func configError(field, reason string) error {
	return &idem.ConfigError{Package: "watermark", Field: field, Reason: reason}
}
