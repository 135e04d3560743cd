package sqlstore

import (
	"context"
	"embed"
	"fmt"
	"slices"
	"strings"

	"github.com/idemkit/idem/internal/sqlmigrate"
)

// The schema, one directory per dialect. Files are named NNNN_name.sql and
// applied in order; {{table}} is replaced by Config.Table. A file holds one
// or more statements, each ending with ";" at the end of a line. A release
// only ever adds files, so a later release still reads today's records.
//
//go:embed migrations/postgres/*.sql migrations/mysql/*.sql migrations/sqlite/*.sql
var migrationFS embed.FS

// Migrate creates or upgrades the records table to this release's schema.
// It is safe to run from several processes at once: they serialise on a
// lock in the database (PostgreSQL: pg_advisory_xact_lock; MySQL:
// GET_LOCK; SQLite: BEGIN IMMEDIATE), and each migration is applied once
// and recorded in Table+"_migrations".
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, 0)
}

// migrate applies the migrations up to version upto (0: all of them).
func (s *Store) migrate(ctx context.Context, upto int) error {
	d, table := s.cfg.Dialect, s.cfg.Table
	ms, err := sqlmigrate.Load(migrationFS, "migrations/"+d.String(), strings.NewReplacer("{{table}}", table))
	if err != nil {
		return fmt.Errorf("sqlstore: %w", err)
	}
	if upto > 0 {
		ms = slices.DeleteFunc(ms, func(m sqlmigrate.Migration) bool { return m.Version > upto })
	}
	vt := table + "_migrations"
	record := build(d, vt, "INSERT INTO {{table}} (version, name, applied_at) VALUES ($1, $2, {{now}})")
	c := sqlmigrate.Config{
		Dialect:            d,
		VersionTable:       vt,
		CreateVersionTable: "CREATE TABLE IF NOT EXISTS " + vt + " (version INTEGER NOT NULL PRIMARY KEY, name VARCHAR(200) NOT NULL, applied_at BIGINT NOT NULL)",
		RecordFunc: func(m sqlmigrate.Migration) (string, []any) {
			return record.sql, record.args(m.Version, m.File)
		},
	}
	// The lock keys are per schema (database) and table, and the same as
	// before sqlmigrate, so that releases on either side take turns.
	switch d {
	case Postgres:
		c.LockKey = `hashtext('idem.sqlstore.' || current_schema() || '.' || $1)`
	case MySQL:
		c.LockKey = `CONCAT('idem_sqlstore_', MD5(CONCAT(DATABASE(), '.', ?)))`
	}
	c.LockArg = table
	if err := sqlmigrate.Run(ctx, s.db, ms, c); err != nil {
		return fail(ctx, "migrate", err)
	}
	if err := s.learnPacket(ctx); err != nil {
		return fail(ctx, "migrate: read max_allowed_packet", err)
	}
	return nil
}
