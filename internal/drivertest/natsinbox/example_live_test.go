package natsinbox_test

import (
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// TestExamples runs the Examples that need NATS (they have no Output line,
// so go test only compiles them) against the test server, and checks what
// they print. Without the server it skips, or fails under
// IDEM_REQUIRE_SERVICES=1.
func TestExamples(t *testing.T) {
	testenv.NATS.Need(t)
	testenv.RunExamples(t,
		testenv.Example{Name: "Example", Run: Example, Want: "messages acked: 2, payments recorded: 1\n"},
	)
}
