package shop

import (
	"os"
	"os/exec"
	"testing"
)

func TestMain(m *testing.M) {
	if IsChild() {
		os.Exit(RunChild())
	}
	os.Exit(m.Run())
}

// childCommand re-runs the test binary as a consumer child.
func childCommand() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }
