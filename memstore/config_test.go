package memstore_test

import (
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/memstore"
)

// TestConfigErrors: the arguments the store's methods reject are reported
// as a *idem.ConfigError of package memstore naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	defer s.Close()
	configtest.WantStoreArgs(t, s, "memstore")
}
