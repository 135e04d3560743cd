package sqlstore

import (
	"context"

	"github.com/idemkit/idem/internal/peek"
)

// What internal/drivertest/sqlstore reads from inside (see package peek):
// the statement texts for the benchmarks' raw-SQL baseline and the pgbench
// scripts, which must run exactly what the Store runs; the table; and
// migrations up to a version, to test upgrades.
func init() {
	peek.SQLStoreClaimSQL = func(s any) string { return s.(*Store).q.claim.sql }
	peek.SQLStoreCompleteSQL = func(s any) string { return s.(*Store).q.complete.sql }
	peek.SQLStoreTable = func(s any) string { return s.(*Store).cfg.Table }
	peek.SQLStoreMigrateTo = func(ctx context.Context, s any, version int) error { return s.(*Store).migrate(ctx, version) }
	peek.SQLStoreMigrations = func(d any) int {
		entries, _ := migrationFS.ReadDir("migrations/" + d.(Dialect).String())
		return len(entries)
	}
}
