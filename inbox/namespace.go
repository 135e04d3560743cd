package inbox

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync/atomic"
)

// namespace is the identity of the database an Inbox's dedup table lives in,
// as it goes into the fast-path keys: Config.Namespace when set, otherwise
// asked from the database once and then cached.
type namespace struct {
	value atomic.Pointer[string] // nil until known
}

// namespace returns the namespace, asking the database when it is not known
// yet. An error (database down, table missing) is not cached: the caller
// skips the fast path this time and a later call asks again. No lock is held
// while asking, so a hung database never makes callers queue behind each
// other here; concurrent first askers all get the same answer.
func (ib *Inbox) namespace(ctx context.Context) (string, error) {
	if v := ib.ns.value.Load(); v != nil {
		return *v, nil
	}
	v, err := ib.queryNamespace(ctx)
	if err != nil {
		return "", err
	}
	ib.ns.value.Store(&v)
	return v, nil
}

// queryNamespace names the table as the database resolves it:
//
//   - PostgreSQL: database, schema and table (the table's schema as
//     search_path finds it, which is the schema the statements use);
//   - MySQL/MariaDB: database and table;
//   - SQLite: the main database file and table.
//
// Two databases on different servers with the same names look alike: set
// Config.Namespace when they share one Redis.
func (ib *Inbox) queryNamespace(ctx context.Context) (string, error) {
	table := ib.cfg.Table
	var parts []sql.NullString
	var query string
	var args []any
	switch ib.cfg.Dialect {
	case Postgres:
		query = `SELECT current_database(), n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`
		args = []any{table}
		parts = make([]sql.NullString, 3)
	case MySQL:
		schema, name := "", table
		if i := strings.IndexByte(table, '.'); i >= 0 {
			schema, name = table[:i], table[i+1:]
		}
		query = `SELECT COALESCE(NULLIF(?, ''), DATABASE()), ?`
		args = []any{schema, name}
		parts = make([]sql.NullString, 2)
	default:
		query = `SELECT file, ? FROM pragma_database_list WHERE name = 'main'`
		args = []any{table}
		parts = make([]sql.NullString, 2)
	}
	dest := make([]any, len(parts))
	for i := range parts {
		dest[i] = &parts[i]
	}
	if err := ib.db.QueryRowContext(ctx, query, args...).Scan(dest...); err != nil {
		if err == sql.ErrNoRows {
			return "", fmt.Errorf("inbox: fast-path namespace: table %s not found (run Migrate): %w", table, err)
		}
		return "", fmt.Errorf("inbox: fast-path namespace of %s: %w", table, err)
	}
	var b strings.Builder
	b.WriteString(ib.cfg.Dialect.String())
	for _, p := range parts {
		if !p.Valid || p.String == "" {
			// No current database (MySQL without one selected) or an
			// in-memory SQLite database: nothing names it across processes.
			return "", fmt.Errorf("inbox: fast-path namespace of %s: the database has no name; set Config.Namespace", table)
		}
		b.WriteByte(0)
		b.WriteString(p.String)
	}
	return b.String(), nil
}
