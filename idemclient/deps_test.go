package idemclient_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The layout promise: idemclient is standard library only, so a client
// that imports it gets nothing else, but for the root package idem, for the
// library's one configuration error (*idem.ConfigError), and the root's
// JSON reader (internal/jsonscan): both are standard library only
// themselves, which the root's own row checks.
func TestDependencies(t *testing.T) {
	t.Parallel()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go tool not found: %v", err)
	}
	for _, pkg := range []string{"github.com/idemkit/idem", "github.com/idemkit/idem/idemclient", "github.com/idemkit/idem/idemclient/browser"} {
		out, err := exec.Command(goTool, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep != pkg && dep != "github.com/idemkit/idem" && dep != "github.com/idemkit/idem/internal/jsonscan" {
				t.Errorf("%s depends on %s", pkg, dep)
			}
		}
	}
}
