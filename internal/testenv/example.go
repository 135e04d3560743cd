package testenv

import (
	"io"
	"os"
	"testing"
)

// Example is a runnable Example and the output it must print.
type Example struct {
	Name string
	Run  func()
	Want string
}

// RunExamples runs Examples that need a server (they have no Output line,
// so go test only compiles them) with os.Stdout captured, and checks what
// each prints. Call it after the services' Need: without them the test
// skips, or fails under IDEM_REQUIRE_SERVICES=1. The calling test must not
// be parallel: os.Stdout is process-wide.
func RunExamples(t *testing.T, examples ...Example) {
	t.Helper()
	for _, ex := range examples {
		t.Run(ex.Name, func(t *testing.T) {
			if got := captureStdout(t, ex.Run); got != ex.Want {
				t.Errorf("%s printed\n%s\nwant\n%s", ex.Name, got, ex.Want)
			}
		})
	}
}

// captureStdout runs fn with os.Stdout redirected and returns what it
// printed.
func captureStdout(t *testing.T, fn func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(r)
		_ = r.Close()
		out <- string(b)
	}()
	stdout := os.Stdout
	os.Stdout = w
	defer func() {
		os.Stdout = stdout
		_ = w.Close()
	}()
	fn()
	os.Stdout = stdout
	_ = w.Close()
	return <-out
}
