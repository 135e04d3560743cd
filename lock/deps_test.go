package lock_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The layout promise: lock is stdlib only, plus packages of idem's own
// that are standard library only themselves: internal/sqldialect (the
// identifier checker) and the root package github.com/idemkit/idem, for the
// library's one configuration error, *idem.ConfigError, with the root's
// JSON reader, internal/jsonscan. Their own promise
// (nothing outside the standard library but each other) is checked here
// too, so that allowing them can never let a third-party module in through
// them. pglock never imports go-redis, redislock never imports a SQL
// driver (database/sql itself is standard library, used by
// lock.FencedTable).
func TestDependencies(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found: %v", err)
	}
	for _, c := range []struct {
		pkg       string
		forbidden []string // import path prefixes; "" = anything outside std and idem
	}{
		{"github.com/idemkit/idem", []string{""}},
		{"github.com/idemkit/idem/internal/sqldialect", []string{""}},
		{"github.com/idemkit/idem/internal/jsonscan", []string{""}},
		{"github.com/idemkit/idem/lock", []string{""}},
		{"github.com/idemkit/idem/lock/pglock", []string{"github.com/redis/", "github.com/jackc/"}},
		{"github.com/idemkit/idem/redis/redislock", []string{"github.com/jackc/", "modernc.org/", "github.com/go-sql-driver/"}},
	} {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", c.pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", c.pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, "github.com/idemkit/idem/lock") ||
				dep == "github.com/idemkit/idem/internal/sqldialect" || dep == "github.com/idemkit/idem/internal/jsonscan" ||
				dep == "github.com/idemkit/idem" {
				continue // standard library only themselves, as their own rows check
			}
			for _, f := range c.forbidden {
				if strings.HasPrefix(dep, f) {
					t.Errorf("%s depends on %s", c.pkg, dep)
				}
			}
		}
	}
}
