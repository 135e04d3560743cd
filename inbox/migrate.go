package inbox

import (
	"context"
	"embed"
	"fmt"

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
	named := ib.schema().Named(ms)
	out := make([]Migration, len(named))
	for i, n := range named {
		out[i] = Migration(n)
	}
	return out, nil
}

// schema is the package's embedded schema for ib's dialect and table.
func (ib *Inbox) schema() sqlmigrate.Embedded {
	return sqlmigrate.Embedded{FS: migrationFS, Dialect: ib.cfg.Dialect, Table: ib.cfg.Table, Package: "inbox"}
}

func (ib *Inbox) load() ([]sqlmigrate.Migration, error) {
	ms, err := ib.schema().Load()
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
	if err := ib.schema().Run(ctx, ib.db, ms); err != nil {
		return fmt.Errorf("inbox: migrate: %w", err)
	}
	return nil
}
