package main

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testenv"
)

// idemBin is the real binary, built once by TestMain for the end-to-end
// tests.
var idemBin string

func TestMain(m *testing.M) {
	if dsn := os.Getenv(heldStepChildEnv); dsn != "" {
		os.Exit(heldStepChild(dsn))
	}
	// A plain build: TestE2EMemoryBudget measures the binary's RSS, which
	// the race detector multiplies (830 MiB against a 384 MiB bound).
	bin, cleanup, err := testenv.BuildIdem(".", false)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	idemBin = bin
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	cleanup()
	os.Exit(code)
}
