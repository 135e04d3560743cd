package fsm_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/idemkit/idem/internal/testenv"
)

func TestMain(m *testing.M) {
	testenv.RunSQLChild(crashWork) // in the crash child: never returns
	goleak.VerifyTestMain(m)
}
