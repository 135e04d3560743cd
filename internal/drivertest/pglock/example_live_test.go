package pglock_test

import (
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// TestExamples runs the Examples that need Postgres (they have no Output line,
// so go test only compiles them) against the test server, and checks what
// they print. Without the server it skips, or fails under
// IDEM_REQUIRE_SERVICES=1.
func TestExamples(t *testing.T) {
	testenv.Postgres.Need(t)
	testenv.RunExamples(t,
		testenv.Example{Name: "Example", Run: Example, Want: "second holder refused: true\nfence: 1\nreleased: true\n"},
		testenv.Example{Name: "ExampleLocker_AcquireTx", Run: ExampleLocker_AcquireTx, Want: "fence: 1\nothers wait while the transaction runs: true\nfree after commit: true\n"},
	)
}
