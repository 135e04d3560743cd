package sqlmigrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/sqlmigrate"
)

// A package loads its dialect's files and runs them; the second Run finds
// everything recorded and does nothing. (A test, not an Example: the package
// is internal, and Examples are for code users can copy.)
func TestLoadAndRunTwice(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "ex.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()

	files := fstest.MapFS{
		"migrations/sqlite/001_widgets.sql": {Data: []byte("CREATE TABLE {{table}} (id INTEGER PRIMARY KEY);\n")},
		"migrations/sqlite/002_index.sql":   {Data: []byte("CREATE INDEX {{table}}_id ON {{table}} (id);\n")},
	}
	ms, err := sqlmigrate.Load(files, "migrations/sqlite", strings.NewReplacer("{{table}}", "widgets"))
	if err != nil {
		t.Fatal(err)
	}
	c := sqlmigrate.Config{
		Dialect:            sqldialect.SQLite,
		VersionTable:       "widgets_migrations",
		CreateVersionTable: "CREATE TABLE IF NOT EXISTS widgets_migrations (version INTEGER PRIMARY KEY)",
		RecordFunc: func(m sqlmigrate.Migration) (string, []any) {
			return "INSERT INTO widgets_migrations (version) VALUES (?)", []any{m.Version}
		},
	}
	for range 2 {
		if err := sqlmigrate.Run(context.Background(), db, ms, c); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM widgets_migrations").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(len(ms), " migrations, ", n, " recorded"); got != "2 migrations, 2 recorded" {
		t.Errorf("got %q, want 2 migrations, 2 recorded", got)
	}
}
