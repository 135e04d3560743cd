package sqlstore

import (
	"context"
	"embed"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem/internal/sqlerr"
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
//
// On a Galera cluster GET_LOCK holds on one node only, so processes that
// migrate through different nodes at once can collide: the loser's schema
// change or version record fails (duplicate table, column or version, or
// a lost certification). Migrate then waits until its node has applied
// the cluster's writes (wsrep_sync_wait) and runs again, skipping what the
// winner recorded, a bounded number of times.
func (s *Store) Migrate(ctx context.Context) error {
	return s.migrate(ctx, 0)
}

// MigrateTo applies the migrations up to and including version, and no
// later one: for a staged upgrade, where the schema moves one version at a
// time while the previous release still runs, or to test an upgrade from
// an older schema. Migrate applies them all. A version below 1 is an error;
// versions already applied are skipped, as in Migrate.
func (s *Store) MigrateTo(ctx context.Context, version int) error {
	if version < 1 {
		return configError("version", "below 1")
	}
	return s.migrate(ctx, version)
}

// Table is the records table the Store reads and writes (Config.Table, or
// its default): for operators' own queries, grants and monitoring. Migrate
// also keeps Table()+"_migrations".
func (s *Store) Table() string { return s.cfg.Table }

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
	err = sqlmigrate.Run(ctx, s.db, ms, c)
	for attempt := 1; err != nil && d == MySQL && attempt < galeraMigrateAttempts && s.galeraMigrateRace(ctx, err); attempt++ {
		err = sqlmigrate.Run(ctx, s.db, ms, c)
	}
	if err != nil {
		return fail(ctx, "migrate", err)
	}
	if err := s.learnPacket(ctx); err != nil {
		return fail(ctx, "migrate: read max_allowed_packet", err)
	}
	return nil
}

// galeraMigrateAttempts bounds Migrate's runs on a Galera cluster.
const galeraMigrateAttempts = 20

// galeraMigrateRace reports whether err is what a migration that raced
// another node's migration of the same table fails with, on a Galera
// node, and if so waits until this node has applied every write the
// cluster committed so far (so that the next run reads the versions the
// winner recorded) and a short random pause.
func (s *Store) galeraMigrateRace(ctx context.Context, err error) bool {
	n, ok := sqlerr.MySQLNumber(err)
	if !ok {
		return false
	}
	switch n {
	case 1050, // table already exists
		1060, // duplicate column name
		1061, // duplicate key name
		1062, // duplicate entry: the version was recorded by another node
		1213: // deadlock: a lost certification
	default:
		return false
	}
	var name, value string
	if s.db.QueryRowContext(ctx, "SHOW VARIABLES LIKE 'wsrep_on'").Scan(&name, &value) != nil || !on(value) {
		return false
	}
	if _, err := s.db.ExecContext(ctx, "SET STATEMENT wsrep_sync_wait = 15 FOR SELECT 1"); err != nil {
		return false
	}
	t := time.NewTimer(time.Duration(10+mrand.IntN(40)) * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
