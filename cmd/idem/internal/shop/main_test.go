package shop

import (
	"os"
	"os/exec"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(RunChild())
	}
	goleak.VerifyTestMain(m)
}

// childCommand re-runs the test binary as a consumer child.
func childCommand() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
