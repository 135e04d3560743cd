package sqltoken

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/sqlmigrate"
)

// The schema: migration/<dialect>/NNN_name.sql, applied in order, with
// {{table}} replaced by Config.Table; statements end with ";" at the end of
// a line.
//
//go:embed migration
var migrations embed.FS

// Migrate creates or upgrades the token table with the embedded migrations.
// Applied versions are recorded in <Table>_migrations. It is safe to run
// from several processes at once: PostgreSQL serialises them with an
// advisory lock, MySQL with GET_LOCK, SQLite with its write lock.
func (s *Store) Migrate(ctx context.Context) error {
	d, table := s.cfg.Dialect, s.cfg.Table
	ms, err := sqlmigrate.Load(migrations, "migration/"+d.String(), strings.NewReplacer("{{table}}", table))
	if err != nil {
		return fmt.Errorf("sqltoken: %w", err)
	}
	vt := table + "_migrations"
	c := sqlmigrate.Config{
		Dialect:            d,
		VersionTable:       vt,
		CreateVersionTable: `CREATE TABLE IF NOT EXISTS ` + vt + ` (version INTEGER PRIMARY KEY)`,
		RecordFunc: func(m sqlmigrate.Migration) (string, []any) {
			return `INSERT INTO ` + vt + ` (version) VALUES (` + d.Placeholder(1) + `)`, []any{m.Version}
		},
		// On PostgreSQL the lock name is the one used before sqlmigrate (it took
		// it as a session lock then; a session and a transaction lock on
		// one key exclude each other), so that releases on either side
		// take turns.
		LockArg: "idem_onetime_migrate_" + table,
	}
	switch d {
	case Postgres:
		c.LockKey = `hashtext($1)`
	case MySQL:
		// MySQL ≥ 5.7 refuses lock names over 64 characters and the name
		// is server-wide: hash it with the database name to 64 hex digits.
		c.LockKey = `SHA2(CONCAT(COALESCE(DATABASE(), ''), '.', ?), 256)`
	}
	if err := sqlmigrate.Run(ctx, s.db, ms, c); err != nil {
		return fmt.Errorf("sqltoken: %w", idem.StoreError(ctx, "migrate", err))
	}
	return nil
}
