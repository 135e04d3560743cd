package inbox

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

//go:embed migrations/postgres/*.sql migrations/mysql/*.sql migrations/sqlite/*.sql
var migrationFS embed.FS

// Migration is one embedded schema change, in the dialect's SQL. {{table}}
// stands for the configured table and {{name}} for its unqualified name.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations of d in order, with the table
// name filled in (for `idem migrate` and for review).
func (ib *Inbox) Migrations() ([]Migration, error) {
	return loadMigrations(ib.cfg.Dialect, ib.cfg.Table)
}

func loadMigrations(d Dialect, table string) ([]Migration, error) {
	dir := "migrations/" + d.String()
	entries, err := fs.ReadDir(migrationFS, dir)
	if err != nil {
		return nil, fmt.Errorf("inbox: read embedded migrations: %w", err)
	}
	name := table
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		name = table[i+1:]
	}
	var out []Migration
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".sql")
		if !ok {
			continue
		}
		num, _, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("inbox: embedded migration %q does not start with a version number", e.Name())
		}
		b, err := migrationFS.ReadFile(path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("inbox: read embedded migration: %w", err)
		}
		s := strings.ReplaceAll(string(b), "{{table}}", table)
		s = strings.ReplaceAll(s, "{{name}}", name)
		out = append(out, Migration{Version: v, Name: base, SQL: s})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out, nil
}

// splitStatements splits a migration at semicolons that end a line, dropping
// "--" comment lines. Migrations contain no semicolons inside literals.
func splitStatements(s string) []string {
	var out []string
	var cur strings.Builder
	for line := range strings.Lines(s) {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		if strings.HasSuffix(t, ";") {
			stmt := strings.TrimSuffix(strings.TrimSpace(cur.String()), ";")
			out = append(out, stmt)
			cur.Reset()
		}
	}
	if rest := strings.TrimSpace(cur.String()); rest != "" {
		out = append(out, rest)
	}
	return out
}

// Migrate creates or upgrades the dedup table with the embedded migrations
// and records the applied versions in the table "<Table>_migrations". It is
// safe to run from several processes at once: PostgreSQL serialises them with
// a transaction-scoped advisory lock (and applies everything in one
// transaction), MySQL with GET_LOCK (its DDL commits implicitly, so every
// migration is written to be re-runnable), SQLite with BEGIN IMMEDIATE.
func (ib *Inbox) Migrate(ctx context.Context) error {
	migs, err := ib.Migrations()
	if err != nil {
		return err
	}
	switch ib.cfg.Dialect {
	case Postgres:
		return ib.migratePostgres(ctx, migs)
	case MySQL:
		return ib.migrateMySQL(ctx, migs)
	default:
		return ib.migrateSQLite(ctx, migs)
	}
}

type execQuerier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (ib *Inbox) migratePostgres(ctx context.Context, migs []Migration) (err error) {
	tx, err := ib.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("inbox: migrate: begin: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rollback(tx))
		}
	}()
	if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1 || current_schema(), 0))`,
		"idem/inbox/migrate:"+ib.cfg.Table+"@"); err != nil {
		return fmt.Errorf("inbox: migrate: advisory lock: %w", err)
	}
	if err := ib.applyMigrations(ctx, tx, migs); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("inbox: migrate: commit: %w", err)
	}
	return nil
}

func (ib *Inbox) migrateMySQL(ctx context.Context, migs []Migration) error {
	conn, err := ib.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	defer conn.Close()
	// GET_LOCK names are server-wide and at most 64 characters.
	const lockExpr = `CONCAT('idem_inbox_migrate_', SHA1(CONCAT(DATABASE(), '.', ?)))`
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(`+lockExpr+`, 60)`, ib.cfg.Table).Scan(&got); err != nil {
		return fmt.Errorf("inbox: migrate: GET_LOCK: %w", err)
	}
	if got.Int64 != 1 {
		return errors.New("inbox: migrate: GET_LOCK timed out after 60s (another migration is running)")
	}
	defer func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(`+lockExpr+`)`, ib.cfg.Table)
	}()
	return ib.applyMigrations(ctx, conn, migs)
}

func (ib *Inbox) migrateSQLite(ctx context.Context, migs []Migration) (err error) {
	conn, err := ib.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	defer conn.Close()
	// BEGIN IMMEDIATE takes the write lock up front (waiting busy_timeout),
	// so two migrators cannot both read "version 0" and then both apply.
	if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return fmt.Errorf("inbox: migrate: begin immediate: %w", err)
	}
	defer func() {
		if err != nil {
			if _, rbErr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`); rbErr != nil {
				err = errors.Join(err, fmt.Errorf("inbox: migrate: rollback: %w", rbErr))
			}
		}
	}()
	if err := ib.applyMigrations(ctx, conn, migs); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("inbox: migrate: commit: %w", err)
	}
	return nil
}

func (ib *Inbox) applyMigrations(ctx context.Context, q execQuerier, migs []Migration) error {
	vt := ib.cfg.Table + "_migrations"
	var create, record string
	switch ib.cfg.Dialect {
	case Postgres:
		create = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES ($1, $2)`
	case MySQL:
		create = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INT PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB`
		record = `INSERT INTO ` + vt + ` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`
	default:
		create = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES (?, ?)`
	}
	if _, err := q.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("inbox: migrate: create %s: %w", vt, err)
	}
	applied := map[int]bool{}
	rows, err := q.QueryContext(ctx, `SELECT version FROM `+vt)
	if err != nil {
		return fmt.Errorf("inbox: migrate: read %s: %w", vt, err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("inbox: migrate: read %s: %w", vt, err)
		}
		applied[v] = true
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("inbox: migrate: read %s: %w", vt, err)
	}
	for _, m := range migs {
		if applied[m.Version] {
			continue
		}
		for _, stmt := range splitStatements(m.SQL) {
			if _, err := q.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("inbox: migrate: %s: %w", m.Name, err)
			}
		}
		if _, err := q.ExecContext(ctx, record, m.Version, m.Name); err != nil {
			return fmt.Errorf("inbox: migrate: record %s: %w", m.Name, err)
		}
	}
	return nil
}
