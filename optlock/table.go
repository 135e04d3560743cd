package optlock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Executor is what Table.Update needs: *sql.DB, *sql.Tx and *sql.Conn all
// satisfy it.
type Executor interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// TableConfig names the columns. A nil *TableConfig means the defaults.
type TableConfig struct {
	IDColumn      string // default "id"; must be unique (a primary key)
	VersionColumn string // default "version"; an integer
}

// Table writes rows of one table with a version check.
type Table struct {
	dialect    Dialect
	name       string
	idCol      string
	versionCol string
}

// NewTable returns a Table for name (optionally schema-qualified) in the
// given dialect. Table and column names must be plain identifiers (letters,
// digits, _); they are written unquoted.
func NewTable(dialect Dialect, name string, cfg *TableConfig) (*Table, error) {
	if err := dialect.Check("optlock", "dialect"); err != nil {
		return nil, err
	}
	if err := checkIdent("table", name, true); err != nil {
		return nil, err
	}
	var c TableConfig
	if cfg != nil {
		c = *cfg
	}
	if c.IDColumn == "" {
		c.IDColumn = "id"
	}
	if c.VersionColumn == "" {
		c.VersionColumn = "version"
	}
	if err := errors.Join(
		checkIdent("TableConfig.IDColumn", c.IDColumn, false),
		checkIdent("TableConfig.VersionColumn", c.VersionColumn, false),
	); err != nil {
		return nil, err
	}
	if strings.EqualFold(c.IDColumn, c.VersionColumn) {
		return nil, configError("TableConfig.VersionColumn", fmt.Sprintf("is the id column (both %q): they must differ", c.IDColumn))
	}
	return &Table{dialect: dialect, name: name, idCol: c.IDColumn, versionCol: c.VersionColumn}, nil
}

// Update is the compare-and-set: one statement,
//
//	UPDATE table SET version = version + 1, col = ?, … WHERE id = ? AND version = ?
//
// It returns nil when the row was at version and is now at version+1 with the
// set columns written, and an error wrapping ErrConflict when no row matched
// (the version moved, or the row is gone). Zero is a version like any other:
// the check is never skipped. set may be empty (a bare version bump); its keys
// are plain identifiers other than the id and version columns, its values are
// bound as parameters.
//
// Because the version always changes, the UPDATE always changes the row it
// matches, even when set writes the values the row already has. That matters
// on MySQL and MariaDB, which report changed rows rather than matched rows
// unless the DSN sets clientFoundRows=true: a same-value write is still 1 row,
// never a false conflict.
func (t *Table) Update(ctx context.Context, db Executor, id any, version int64, set map[string]any) error {
	query, args, err := t.updateSQL(id, version, set)
	if err != nil {
		return err
	}
	res, err := db.ExecContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("optlock: update %s id %v: %w", t.name, id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("optlock: update %s id %v: rows affected: %w", t.name, id, err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return fmt.Errorf("%w: %s id %v is not at version %d", ErrConflict, t.name, id, version)
	default:
		return fmt.Errorf("optlock: update %s id %v matched %d rows: the %s column must be unique", t.name, id, n, t.idCol)
	}
}

func (t *Table) updateSQL(id any, version int64, set map[string]any) (string, []any, error) {
	cols := make([]string, 0, len(set))
	for col := range set {
		if err := checkIdent("set", col, false); err != nil {
			return "", nil, err
		}
		// Unquoted identifiers are case-insensitive in every dialect: VERSION
		// is the version column. On MySQL and SQLite a second assignment to
		// it would win over the bump and defeat the compare-and-set.
		if strings.EqualFold(col, t.idCol) || strings.EqualFold(col, t.versionCol) {
			return "", nil, configError("set", fmt.Sprintf("must not write the %q column", col))
		}
		cols = append(cols, col)
	}
	slices.Sort(cols) // deterministic SQL text, friendly to statement caches
	seen := make(map[string]string, len(cols))
	for _, col := range cols {
		k := strings.ToLower(col)
		if prev, ok := seen[k]; ok {
			return "", nil, configError("set", fmt.Sprintf("names one column twice (%q and %q): identifiers are case-insensitive", prev, col))
		}
		seen[k] = col
	}

	args := make([]any, 0, len(cols)+2)
	var b strings.Builder
	b.Grow(64 + 16*len(cols))
	b.WriteString("UPDATE " + t.name + " SET " + t.versionCol + " = " + t.versionCol + " + 1")
	for _, col := range cols {
		args = append(args, set[col])
		b.WriteString(", " + col + " = " + t.dialect.Placeholder(len(args)))
	}
	args = append(args, id)
	b.WriteString(" WHERE " + t.idCol + " = " + t.dialect.Placeholder(len(args)))
	args = append(args, version)
	b.WriteString(" AND " + t.versionCol + " = " + t.dialect.Placeholder(len(args)))

	return b.String(), args, nil
}
