package sqlmigrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing/fstest"

	_ "modernc.org/sqlite"

	"github.com/idemkit/idem/internal/sqldialect"
	"github.com/idemkit/idem/internal/sqlmigrate"
)

// A package loads its dialect's files and runs them; the second Run finds
// everything recorded and does nothing.
func Example() {
	dir, _ := os.MkdirTemp("", "sqlmigrate")
	defer os.RemoveAll(dir)
	db, _ := sql.Open("sqlite", "file:"+filepath.Join(dir, "ex.db")+"?_pragma=busy_timeout(5000)")
	defer db.Close()

	files := fstest.MapFS{
		"migrations/sqlite/001_widgets.sql": {Data: []byte("CREATE TABLE {{table}} (id INTEGER PRIMARY KEY);\n")},
		"migrations/sqlite/002_index.sql":   {Data: []byte("CREATE INDEX {{table}}_id ON {{table}} (id);\n")},
	}
	ms, err := sqlmigrate.Load(files, "migrations/sqlite", strings.NewReplacer("{{table}}", "widgets"))
	if err != nil {
		panic(err)
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
			panic(err)
		}
	}
	var n int
	_ = db.QueryRow("SELECT COUNT(*) FROM widgets_migrations").Scan(&n)
	fmt.Println(len(ms), "migrations,", n, "recorded")
	// Output: 2 migrations, 2 recorded
}
