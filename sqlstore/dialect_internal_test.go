package sqlstore

import "testing"

// TestPkgDialect: the drivers whose dialect New tells by itself (a zero
// Config.Dialect, or a nil *Config), and paths that only look alike.
func TestPkgDialect(t *testing.T) {
	for path, want := range map[string]Dialect{
		"github.com/jackc/pgx/v5/stdlib":       Postgres,
		"github.com/jackc/pgx/v4/stdlib":       Postgres,
		"github.com/lib/pq":                    Postgres,
		"github.com/go-sql-driver/mysql":       MySQL,
		"modernc.org/sqlite":                   SQLite,
		"github.com/mattn/go-sqlite3":          SQLite,
		"github.com/ncruces/go-sqlite3/driver": SQLite,
		"github.com/lib/pqx":                   0,
		"example.com/github.com/lib/pq":        0,
		"github.com/go-sql-driver/mysqlx":      0,
		"modernc.org/sqlite/lib":               0,
		"github.com/idemkit/idem/sqlstore":     0,
		"":                                     0,
	} {
		d, ok := pkgDialect(path)
		if d != want || ok != (want != 0) {
			t.Errorf("pkgDialect(%q) = %v, %v; want %v", path, d, ok, want)
		}
	}
}
