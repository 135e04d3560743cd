package inbox

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/idemkit/idem/internal/sqlmigrate"
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
	ms, err := ib.load()
	if err != nil {
		return nil, err
	}
	out := make([]Migration, len(ms))
	for i, m := range ms {
		out[i] = Migration{Version: m.Version, Name: strings.TrimSuffix(m.File, ".sql"), SQL: m.SQL}
	}
	return out, nil
}

func (ib *Inbox) load() ([]sqlmigrate.Migration, error) {
	table := ib.cfg.Table
	name := table[strings.LastIndexByte(table, '.')+1:]
	ms, err := sqlmigrate.Load(migrationFS, "migrations/"+ib.cfg.Dialect.String(),
		strings.NewReplacer("{{table}}", table, "{{name}}", name))
	if err != nil {
		return nil, fmt.Errorf("inbox: embedded migrations: %w", err)
	}
	return ms, nil
}

// Migrate creates or upgrades the dedup table with the embedded migrations
// and records the applied versions in the table "<Table>_migrations". It is
// safe to run from several processes at once: PostgreSQL serialises them with
// a transaction-scoped advisory lock (and applies everything in one
// transaction), MySQL with GET_LOCK (its DDL commits implicitly, so every
// migration is written to be re-runnable), SQLite with BEGIN IMMEDIATE.
func (ib *Inbox) Migrate(ctx context.Context) error {
	ms, err := ib.load()
	if err != nil {
		return err
	}
	vt := ib.cfg.Table + "_migrations"
	c := sqlmigrate.Config{Dialect: ib.cfg.Dialect, VersionTable: vt}
	// The version is recorded under the file name without ".sql". The lock
	// keys are the ones used before sqlmigrate, so that releases on either
	// side take turns.
	var record string
	switch ib.cfg.Dialect {
	case Postgres:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES ($1, $2)`
		c.LockKey, c.LockArg = `hashtextextended($1 || current_schema(), 0)`, "idem/inbox/migrate:"+ib.cfg.Table+"@"
	case MySQL:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INT PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB`
		record = `INSERT INTO ` + vt + ` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`
		c.LockKey, c.LockArg = `CONCAT('idem_inbox_migrate_', SHA1(CONCAT(DATABASE(), '.', ?)))`, ib.cfg.Table
	default:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES (?, ?)`
	}
	c.RecordFunc = func(m sqlmigrate.Migration) (string, []any) {
		return record, []any{m.Version, strings.TrimSuffix(m.File, ".sql")}
	}
	if err := sqlmigrate.Run(ctx, ib.db, ms, c); err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	return nil
}
