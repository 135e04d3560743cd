package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// The schema, one directory per dialect. Files are named NNNN_name.sql and
// applied in order; {{table}} is replaced by Config.Table. A file holds one
// or more statements, each ending with ";" at the end of a line. A release
// only ever adds files, so a later release still reads today's records.
//
//go:embed migrations/postgres/*.sql migrations/mysql/*.sql migrations/sqlite/*.sql
var migrationFS embed.FS

type migration struct {
	version    int
	name       string
	statements []string
}

func (s *Store) migrations() ([]migration, error) {
	dir := "migrations/" + s.cfg.Dialect.String()
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("sqlstore: migration %s: name must start with a positive number and _", name)
		}
		text, err := migrationFS.ReadFile(path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		m := migration{version: v, name: name}
		for _, stmt := range splitStatements(strings.ReplaceAll(string(text), "{{table}}", s.cfg.Table)) {
			m.statements = append(m.statements, stmt)
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// splitStatements splits a migration file at the semicolons that end a
// line, dropping statements made only of comments.
func splitStatements(text string) []string {
	var out []string
	var cur strings.Builder
	flush := func() {
		stmt := strings.TrimSpace(cur.String())
		cur.Reset()
		meaningful := false
		for _, line := range strings.Split(stmt, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
				meaningful = true
			}
		}
		if meaningful {
			out = append(out, stmt)
		}
	}
	for _, line := range strings.SplitAfter(text, "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasSuffix(trimmed, ";") {
			cur.WriteString(strings.TrimSuffix(trimmed, ";"))
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}

// Migrate creates or upgrades the records table to this release's schema.
// It is safe to run from several processes at once: they serialise on a
// lock in the database (PostgreSQL: pg_advisory_xact_lock; MySQL:
// GET_LOCK; SQLite: BEGIN IMMEDIATE), and each migration is applied once
// and recorded in Table+"_migrations".
func (s *Store) Migrate(ctx context.Context) (err error) {
	ms, err := s.migrations()
	if err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fail(ctx, "migrate", err)
	}
	defer func() {
		if err != nil {
			// The session may hold a lock or an open transaction: never
			// hand it back to the pool.
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
		_ = conn.Close()
	}()
	switch s.cfg.Dialect {
	case Postgres:
		return s.migratePostgres(ctx, conn, ms)
	case MySQL:
		return s.migrateMySQL(ctx, conn, ms)
	default:
		return s.migrateSQLite(ctx, conn, ms)
	}
}

func (s *Store) migrationsTable() string { return s.cfg.Table + "_migrations" }

func (s *Store) createMigrationsTable() string {
	return "CREATE TABLE IF NOT EXISTS " + s.migrationsTable() + " (version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at BIGINT NOT NULL)"
}

// apply runs the migrations not yet recorded, on ex, which holds the lock.
func (s *Store) apply(ctx context.Context, ex interface {
	Execer
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, ms []migration) error {
	if _, err := ex.ExecContext(ctx, s.createMigrationsTable()); err != nil {
		return fail(ctx, "migrate", err)
	}
	rows, err := ex.QueryContext(ctx, "SELECT version FROM "+s.migrationsTable())
	if err != nil {
		return fail(ctx, "migrate", err)
	}
	done := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fail(ctx, "migrate", err)
		}
		done[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(ctx, "migrate", err)
	}
	record := build(s.cfg.Dialect, s.migrationsTable(), "INSERT INTO {{table}} (version, name, applied_at) VALUES ($1, $2, {{now}})")
	for _, m := range ms {
		if done[m.version] {
			continue
		}
		for _, stmt := range m.statements {
			if _, err := ex.ExecContext(ctx, stmt); err != nil {
				return fail(ctx, "migrate", fmt.Errorf("%s: %w", m.name, err))
			}
		}
		if _, err := ex.ExecContext(ctx, record.sql, record.args(m.version, m.name)...); err != nil {
			return fail(ctx, "migrate", err)
		}
	}
	return nil
}

func (s *Store) migratePostgres(ctx context.Context, conn *sql.Conn, ms []migration) error {
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return fail(ctx, "migrate", err)
	}
	// DDL is transactional in PostgreSQL: the lock and the schema change
	// commit together. The lock key is per schema and table.
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext('idem.sqlstore.' || current_schema() || '.' || $1))`, s.cfg.Table); err != nil {
		return errors.Join(fail(ctx, "migrate", err), tx.Rollback())
	}
	if err := s.apply(ctx, tx, ms); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	if err := tx.Commit(); err != nil {
		return fail(ctx, "migrate", err)
	}
	return nil
}

func (s *Store) migrateMySQL(ctx context.Context, conn *sql.Conn, ms []migration) error {
	// DDL commits implicitly in MySQL, so a session lock serialises the
	// migrators instead of a transaction; each statement is idempotent
	// (IF NOT EXISTS) in case a migrator died half-way.
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT('idem_sqlstore_', MD5(CONCAT(DATABASE(), '.', ?))), 60)`, s.cfg.Table).Scan(&got); err != nil {
		return fail(ctx, "migrate", err)
	}
	if got.Int64 != 1 {
		return idem.Unavailable("migrate", errors.New("sqlstore: timed out waiting for the migration lock (GET_LOCK)"))
	}
	err := s.apply(ctx, conn, ms)
	if _, rerr := conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(CONCAT('idem_sqlstore_', MD5(CONCAT(DATABASE(), '.', ?))))`, s.cfg.Table); rerr != nil && err == nil {
		err = fail(ctx, "migrate", rerr)
	}
	return err
}

func (s *Store) migrateSQLite(ctx context.Context, conn *sql.Conn, ms []migration) error {
	// BEGIN IMMEDIATE takes the database's write lock at once (waiting up
	// to busy_timeout), so concurrent migrators run one after the other.
	if _, err := conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fail(ctx, "migrate", err)
	}
	if err := s.apply(ctx, conn, ms); err != nil {
		_, rerr := conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
		return errors.Join(err, rerr)
	}
	if _, err := conn.ExecContext(ctx, "COMMIT"); err != nil {
		return fail(ctx, "migrate", err)
	}
	return nil
}
