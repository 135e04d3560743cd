package lock_test

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
		testenv.Example{Name: "ExampleDo", Run: ExampleDo, Want: "charging the card\nalready paid: idempotent success\n"},
	)
}
