package outbox

import (
	"context"
	"embed"
	"fmt"

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
	named := o.schema().Named(ms)
	out := make([]Migration, len(named))
	for i, n := range named {
		out[i] = Migration(n)
	}
	return out, nil
}

// schema is the package's embedded schema for o's dialect and table.
func (o *Outbox) schema() sqlmigrate.Embedded {
	return sqlmigrate.Embedded{FS: migrationFS, Dialect: o.cfg.Dialect, Table: o.cfg.Table, Package: "outbox"}
}

func (o *Outbox) load() ([]sqlmigrate.Migration, error) {
	ms, err := o.schema().Load()
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
	if err := o.schema().Run(ctx, o.db, ms); err != nil {
		return fmt.Errorf("outbox: migrate: %w", err)
	}
	return nil
}
