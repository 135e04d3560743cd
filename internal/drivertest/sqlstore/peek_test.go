package sqlstore_test

import (
	"context"

	"github.com/idemkit/idem/internal/peek"
	"github.com/idemkit/idem/sqlstore"
)

// Statement texts, for the benchmarks' raw-SQL baseline and the pgbench
// scripts, which must run exactly what the Store runs.

func claimSQL(s *sqlstore.Store) string    { return peek.SQLStoreClaimSQL(s) }
func completeSQL(s *sqlstore.Store) string { return peek.SQLStoreCompleteSQL(s) }
func storeTable(s *sqlstore.Store) string  { return peek.SQLStoreTable(s) }

// migrateTo applies the migrations up to version, to test upgrades.
func migrateTo(ctx context.Context, s *sqlstore.Store, version int) error {
	return peek.SQLStoreMigrateTo(ctx, s, version)
}

// migrations is the number of embedded migrations of d.
func migrations(d sqlstore.Dialect) int { return peek.SQLStoreMigrations(d) }
