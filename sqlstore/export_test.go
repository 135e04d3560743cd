package sqlstore

import "context"

// Statement texts, for the benchmarks' raw-SQL baseline and the pgbench
// scripts, which must run exactly what the Store runs.

func (s *Store) ClaimSQL() string    { return s.q.claim.sql }
func (s *Store) CompleteSQL() string { return s.q.complete.sql }
func (s *Store) Table() string       { return s.cfg.Table }

// MigrateTo applies the migrations up to version, to test upgrades.
func (s *Store) MigrateTo(ctx context.Context, version int) error { return s.migrate(ctx, version) }

// Migrations is the number of embedded migrations of d.
func Migrations(d Dialect) int {
	entries, _ := migrationFS.ReadDir("migrations/" + d.String())
	return len(entries)
}
