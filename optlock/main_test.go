package optlock

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(crashChildEnv) != "" {
		crashChild() // never returns: blocks until the parent kills it
	}
	goleak.VerifyTestMain(m)
}
