package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemkit/idem/sqlstore"
)

// Statement texts, for the benchmarks' raw-SQL baseline and the pgbench
// scripts, which must run exactly what the Store runs. The sqlstore
// package's own TestStatementsFile keeps them in its
// testdata/statements.sql, with the table written {{table}}.

func claimSQL(d sqlstore.Dialect, table string) string    { return statement(d, "claim", table) }
func completeSQL(d sqlstore.Dialect, table string) string { return statement(d, "complete", table) }

func statement(d sqlstore.Dialect, name, table string) string {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "sqlstore", "testdata", "statements.sql"))
	if err != nil {
		panic(err)
	}
	head := fmt.Sprintf("-- %s %s\n", d, name)
	_, rest, ok := strings.Cut(string(b), head)
	if !ok {
		panic("sqlstore/testdata/statements.sql has no " + strings.TrimSpace(head))
	}
	stmt, _, _ := strings.Cut(rest, ";\n\n")
	return strings.ReplaceAll(stmt, "{{table}}", table)
}

func storeTable(s *sqlstore.Store) string { return s.Table() }

// migrateTo applies the migrations up to version, to test upgrades.
func migrateTo(ctx context.Context, s *sqlstore.Store, version int) error {
	return s.MigrateTo(ctx, version)
}

// migrations is the number of migrations of d in the sqlstore package's
// source, which the package embeds.
func migrations(t testing.TB, d sqlstore.Dialect) int {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join("..", "..", "..", "sqlstore", "migrations", d.String()))
	if err != nil {
		t.Fatal(err)
	}
	return len(entries)
}
