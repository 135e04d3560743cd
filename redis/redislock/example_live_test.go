package redislock_test

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
		testenv.Example{Name: "Example", Run: Example, Want: "second holder refused: true\nreleased: true\nfence grew: true\n"},
		testenv.Example{Name: "Example_lostLease", Run: Example_lostLease, Want: "A told it lost the lock: true\n" +
			"A's release: redislock: release \"report\": lock: not held: another owner holds the lock\n" +
			"B's release: <nil>\n"},
	)
}
