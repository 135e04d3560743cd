package sqltoken

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

	"github.com/idemkit/idem"
)

//go:embed migration
var migrations embed.FS

type migration struct {
	version    int
	statements []string
}

// loadMigrations returns the dialect's migrations in version order, with
// the table name filled in. Files are migration/<dialect>/NNN_name.sql;
// statements end with ";" at the end of a line.
func loadMigrations(d Dialect, table string) ([]migration, error) {
	dir := path.Join("migration", d.String())
	entries, err := fs.ReadDir(migrations, dir)
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		num, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			return nil, fmt.Errorf("sqltoken: migration file %s has no version prefix", e.Name())
		}
		body, err := fs.ReadFile(migrations, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		m := migration{version: v}
		for _, stmt := range strings.SplitAfter(strings.ReplaceAll(string(body), "{{table}}", table), ";\n") {
			if s := strings.TrimSpace(stripComments(stmt)); s != "" {
				m.statements = append(m.statements, strings.TrimSuffix(s, ";"))
			}
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

func stripComments(s string) string {
	var b strings.Builder
	for line := range strings.Lines(s) {
		if !strings.HasPrefix(strings.TrimSpace(line), "--") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// Migrate creates or upgrades the token table with the embedded migrations.
// Applied versions are recorded in <Table>_migrations. It is safe to run
// from several processes at once: PostgreSQL serialises them with an
// advisory lock, MySQL with GET_LOCK, SQLite with its write lock.
func (s *Store) Migrate(ctx context.Context) (err error) {
	ms, err := loadMigrations(s.cfg.Dialect, s.cfg.Table)
	if err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return idem.Unavailable("migrate", err)
	}
	defer conn.Close()
	lockName := "idem_onetime_migrate_" + s.cfg.Table
	switch s.cfg.Dialect {
	case Postgres:
		// Session lock: held across the DDL, released below or when the
		// connection closes.
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock(hashtext($1))`, lockName); err != nil {
			return idem.Unavailable("migrate: lock", err)
		}
		defer func() {
			_, uerr := conn.ExecContext(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext($1))`, lockName)
			err = errors.Join(err, idem.Unavailable("migrate: unlock", uerr))
		}()
	case MySQL:
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 60)`, lockName).Scan(&got); err != nil {
			return idem.Unavailable("migrate: lock", err)
		}
		if got.Int64 != 1 {
			return fmt.Errorf("sqltoken: migrate: could not take lock %q within 60s", lockName)
		}
		defer func() {
			_, uerr := conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, lockName)
			err = errors.Join(err, idem.Unavailable("migrate: unlock", uerr))
		}()
	case SQLite:
		// BEGIN IMMEDIATE takes the write lock up front (busy_timeout
		// waits for it), so two migrators never interleave.
		if _, err := conn.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
			return idem.Unavailable("migrate: lock", err)
		}
		defer func() {
			if err != nil {
				_, rerr := conn.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
				err = errors.Join(err, rerr)
				return
			}
			if _, cerr := conn.ExecContext(ctx, `COMMIT`); cerr != nil {
				err = idem.Unavailable("migrate: commit", cerr)
			}
		}()
	}
	vt := s.cfg.Table + "_migrations"
	if _, err := conn.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+vt+` (version INTEGER PRIMARY KEY)`); err != nil {
		return idem.Unavailable("migrate: version table", err)
	}
	applied := map[int]bool{}
	rows, err := conn.QueryContext(ctx, `SELECT version FROM `+vt)
	if err != nil {
		return idem.Unavailable("migrate: read versions", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return idem.Unavailable("migrate: read versions", err)
		}
		applied[v] = true
	}
	if err := rows.Close(); err != nil {
		return idem.Unavailable("migrate: read versions", err)
	}
	ins := `INSERT INTO ` + vt + ` (version) VALUES (?)`
	if s.cfg.Dialect == Postgres {
		ins = `INSERT INTO ` + vt + ` (version) VALUES ($1)`
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		for _, stmt := range m.statements {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return fmt.Errorf("sqltoken: migration %d: %w", m.version, idem.Unavailable("migrate", err))
			}
		}
		if _, err := conn.ExecContext(ctx, ins, m.version); err != nil {
			return idem.Unavailable("migrate: record version", err)
		}
	}
	return nil
}
