package redisstore_test

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
		testenv.Example{Name: "Example", Run: Example, Want: "charging the card\nch_1001 <nil>\nch_1001 <nil>\nch_1001 <nil>\n"},
		testenv.Example{Name: "ExampleStore_Begin", Run: ExampleStore_Begin, Want: "first: acquired\nwhile running: in_flight\n" +
			"after completion: replay {\"order\":7}\nother request, same key: mismatch\n"},
		testenv.Example{Name: "ExampleNewRueidis", Run: ExampleNewRueidis, Want: "sending the email\nsent <nil>\nsent <nil>\n"},
	)
}
