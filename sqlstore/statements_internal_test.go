package sqlstore

import (
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
)

// statementsFile holds the claim and completion statements of each
// dialect, with the table written {{table}}. The driver tests'
// benchmarks (internal/drivertest/sqlstore) run them raw as a baseline
// and turn them into the pgbench scripts: this test keeps the file equal
// to what the Store sends, so they run exactly that without reaching into
// the package. IDEM_UPDATE_STATEMENTS=1 rewrites it.
const statementsFile = "testdata/statements.sql"

const statementsTable = "idem_statements_table"

func TestStatementsFile(t *testing.T) {
	var b strings.Builder
	for _, d := range []Dialect{Postgres, MySQL, SQLite} {
		s, err := New(&sql.DB{}, &Config{Dialect: d, Table: statementsTable})
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range []struct{ name, sql string }{{"claim", s.q.claim.sql}, {"complete", s.q.complete.sql}} {
			fmt.Fprintf(&b, "-- %s %s\n%s;\n\n", d, st.name, strings.ReplaceAll(st.sql, statementsTable, "{{table}}"))
		}
	}
	if os.Getenv("IDEM_UPDATE_STATEMENTS") == "1" {
		if err := os.WriteFile(statementsFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(statementsFile)
	if err != nil {
		t.Fatalf("%v (IDEM_UPDATE_STATEMENTS=1 go test -run TestStatementsFile ./sqlstore writes it)", err)
	}
	if string(got) != b.String() {
		t.Errorf("%s differs from the Store's statements; run IDEM_UPDATE_STATEMENTS=1 go test -run TestStatementsFile ./sqlstore", statementsFile)
	}
}

// TestMigrateToRejectsNoVersion: MigrateTo refuses a version below 1
// before any I/O (the nil-backed *sql.DB would panic on a query).
func TestMigrateToRejectsNoVersion(t *testing.T) {
	s, err := New(&sql.DB{}, &Config{Dialect: Postgres})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []int{0, -1} {
		if err := s.MigrateTo(t.Context(), v); err == nil || !strings.Contains(err.Error(), "version") {
			t.Errorf("MigrateTo(%d): %v, want a config error naming version", v, err)
		}
	}
	if s.Table() != DefaultTable {
		t.Errorf("Table() = %q, want the default %q", s.Table(), DefaultTable)
	}
}
