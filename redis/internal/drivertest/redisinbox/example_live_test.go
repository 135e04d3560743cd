package redisinbox_test

import (
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// TestExamples runs the Examples that need Redis (they have no Output line,
// so go test only compiles them) against the test server, and checks what
// they print. Without the server it skips, or fails under
// IDEM_REQUIRE_SERVICES=1.
func TestExamples(t *testing.T) {
	testenv.Redis.Need(t)
	testenv.RunExamples(t,
		testenv.Example{Name: "Example", Run: Example, Want: "processed <nil>\nduplicate <nil>\nduplicate <nil>\nanswered by Redis: 2\n"},
		testenv.Example{Name: "ExampleNewRueidis", Run: ExampleNewRueidis, Want: "first delivery claimed: true\nredelivery after the commit is done: true\n"},
	)
}
