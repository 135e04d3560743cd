package sqlmigrate

import (
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/internal/sqldialect"
)

// TestConfigErrors: every field Run requires is reported as a
// *idem.ConfigError of package sqlmigrate naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ok := func() Config {
		return Config{
			Dialect: sqldialect.Postgres, VersionTable: "t_migrations", CreateVersionTable: "CREATE TABLE t_migrations (v int)",
			RecordFunc: func(Migration) (string, []any) { return "", nil }, LockKey: "t",
		}
	}
	if c := ok(); c.validate() != nil {
		t.Fatalf("valid config: %v", c.validate())
	}
	for field, mutate := range map[string]func(*Config){
		"Config.Dialect":            func(c *Config) { c.Dialect = 0 },
		"Config.VersionTable":       func(c *Config) { c.VersionTable = "" },
		"Config.CreateVersionTable": func(c *Config) { c.CreateVersionTable = "" },
		"Config.RecordFunc":         func(c *Config) { c.RecordFunc = nil },
		"Config.LockKey":            func(c *Config) { c.LockKey = "" },
	} {
		c := ok()
		mutate(&c)
		configtest.Want(t, c.validate(), "sqlmigrate", field)
	}
}
