package inbox_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoDriverDeps: importing inbox must not drag in Redis or any SQL driver;
// those belong to the application (and to redisinbox).
func TestNoDriverDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/idemkit/idem/inbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/redis/", "github.com/jackc/", "github.com/go-sql-driver/", "modernc.org/sqlite", "net/http"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("inbox depends on %s", dep)
			}
		}
	}
}
