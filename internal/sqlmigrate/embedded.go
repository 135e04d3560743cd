package sqlmigrate

import (
	"context"
	"database/sql"
	"io/fs"
	"strings"

	"github.com/idemkit/idem/internal/sqldialect"
)

// Embedded is the schema of a package that embeds one directory of
// NNN_name.sql files per dialect (migrations/postgres, migrations/mysql,
// migrations/sqlite) for one table: inbox and outbox. In the files
// {{table}} stands for Table and {{name}} for its unqualified name. The
// applied versions are recorded in Table+"_migrations" under the file name
// without ".sql", and runs are serialised per schema and table by a lock
// named after Package ("inbox": "idem/inbox/migrate:…" on PostgreSQL,
// "idem_inbox_migrate_…" on MySQL), the keys these packages used before
// sqlmigrate, so that releases on either side take turns.
type Embedded struct {
	FS      fs.FS
	Dialect sqldialect.Dialect
	Table   string
	Package string
}

// Load reads the dialect's migrations with the table names filled in.
func (e Embedded) Load() ([]Migration, error) {
	name := e.Table[strings.LastIndexByte(e.Table, '.')+1:]
	return Load(e.FS, "migrations/"+e.Dialect.String(), strings.NewReplacer("{{table}}", e.Table, "{{name}}", name))
}

// Named is a migration as the packages show it (Migrations methods): its
// name is the file name without ".sql".
type Named struct {
	Version int
	Name    string
	SQL     string
}

// Named returns ms as the packages show them.
func (e Embedded) Named(ms []Migration) []Named {
	out := make([]Named, len(ms))
	for i, m := range ms {
		out[i] = Named{Version: m.Version, Name: strings.TrimSuffix(m.File, ".sql"), SQL: m.SQL}
	}
	return out
}

// Run applies ms (from Load) with Run, under the version table and lock
// described on Embedded.
func (e Embedded) Run(ctx context.Context, db *sql.DB, ms []Migration) error {
	vt := e.Table + "_migrations"
	c := Config{Dialect: e.Dialect, VersionTable: vt}
	var record string
	switch e.Dialect {
	case sqldialect.Postgres:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT clock_timestamp())`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES ($1, $2)`
		c.LockKey, c.LockArg = `hashtextextended($1 || current_schema(), 0)`, "idem/"+e.Package+"/migrate:"+e.Table+"@"
	case sqldialect.MySQL:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INT PRIMARY KEY, name VARCHAR(255) NOT NULL, applied_at DATETIME(6) NOT NULL) ENGINE = InnoDB`
		record = `INSERT INTO ` + vt + ` (version, name, applied_at) VALUES (?, ?, UTC_TIMESTAMP(6))`
		c.LockKey, c.LockArg = `CONCAT('idem_`+e.Package+`_migrate_', SHA1(CONCAT(DATABASE(), '.', ?)))`, e.Table
	default:
		c.CreateVersionTable = `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP)`
		record = `INSERT INTO ` + vt + ` (version, name) VALUES (?, ?)`
	}
	c.RecordFunc = func(m Migration) (string, []any) {
		return record, []any{m.Version, strings.TrimSuffix(m.File, ".sql")}
	}
	return Run(ctx, db, ms, c)
}
