package outbox

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/idemkit/idem/internal/sqlmigrate"
)

//go:embed migrations/postgres/*.sql migrations/mysql/*.sql migrations/sqlite/*.sql
var migrationFS embed.FS

// Migration is one embedded schema change, in the dialect's SQL, with the
// table names filled in.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// Migrations returns the embedded migrations in order (for `idem migrate`
// and for review).
func (o *Outbox) Migrations() ([]Migration, error) {
	ms, err := o.load()
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, Name: strings.TrimSuffix(m.File, ".sql"), SQL: m.SQL}
	}
	return out, nil
}

func (o *Outbox) load() ([]sqlmigrate.Migration, error) {
	table := o.cfg.Table
	name := table[strings.LastIndexByte(table, '.')+1:]
	ms, err := sqlmigrate.Load(migrationFS, "migrations/"+o.cfg.Dialect.String(),
		strings.NewReplacer("{{table}}", table, "{{name}}", name))
	if err != nil {
		return nil, fmt.Errorf("outbox: embedded migrations: %w", err)
	}
	return ms, nil
}

// Migrate creates or upgrades the outbox tables with the embedded
// migrations and records the applied versions in Table+"_migrations". It is
// safe to run from several processes at once (see inbox.Migrate: the same
// runner and locks).
func (o *Outbox) Migrate(ctx context.Context) error {
	ms, err := o.load()
	if err != nil {
		return err
	}
	vt := o.cfg.Table + "_migrations"
	c := sqlmigrate.Config{Dialect: o.cfg.Dialect, VersionTable: vt}
	var record string
	switch o.cfg.Dialect {
	case Postgres:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES ($1, $2)`
		c.LockKey, c.LockArg = `hashtextextended($1 || current_schema(), 0)`, "idem/outbox/migrate:"+o.cfg.Table+"@"
	case MySQL:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INT PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB`
		record = `INSERT INTO ` + vt + ` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`
		c.LockKey, c.LockArg = `CONCAT('idem_outbox_migrate_', SHA1(CONCAT(DATABASE(), '.', ?)))`, o.cfg.Table
	default:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES (?, ?)`
	}
	c.RecordFunc = func(m sqlmigrate.Migration) (string, []any) {
		return record, []any{m.Version, strings.TrimSuffix(m.File, ".sql")}
	}
	if err := sqlmigrate.Run(ctx, o.db, ms, c); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}
