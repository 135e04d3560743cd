package amqpinbox_test

import (
	"io"
	"os"
	"testing"

	"github.com/idemkit/idem/internal/testenv"
)

// TestExamples runs the Examples that need AMQP (they have no Output line,
// so go test only compiles them) against the test server, and checks what
// they print. Without the server it skips, or fails under
// IDEM_REQUIRE_SERVICES=1.
func TestExamples(t *testing.T) {
	testenv.AMQP.Need(t)
	for _, ex := range []struct {
		name string
		run  func()
		want string
	}{
		{"Example", Example, "shipments: 1\n"},
	} {
		t.Run(ex.name, func(t *testing.T) {
			if got := exampleOutput(t, ex.run); got != ex.want {
				t.Errorf("%s printed\n%s\nwant\n%s", ex.name, got, ex.want)
			}
		})
	}
}

// exampleOutput runs example with os.Stdout redirected and returns what it
// printed. The test must not be parallel: os.Stdout is process-wide.
func exampleOutput(t *testing.T, example func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		r.Close()
		out <- string(b)
	}()
	stdout := os.Stdout
	os.Stdout = w
	defer func() {
		os.Stdout = stdout
		w.Close()
	}()
	example()
	os.Stdout = stdout
	w.Close()
	return <-out
}
