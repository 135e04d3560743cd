package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/memstore"
)

// TestConfigErrors: the arguments the store's methods reject are reported
// as a *idem.ConfigError of package memstore naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	s := memstore.New(nil)
	defer s.Close()
	ctx := context.Background()
	_, err := s.Purge(ctx, time.Hour, 0)
	configtest.Want(t, err, "memstore", "batch")
	_, err = s.Purge(ctx, -time.Hour, 10)
	configtest.Want(t, err, "memstore", "grace")
	_, err = s.List(ctx, 0, false, 0)
	configtest.Want(t, err, "memstore", "limit")
	_, err = s.List(ctx, idem.State(200), false, 10)
	configtest.Want(t, err, "memstore", "state")
	configtest.Want(t, s.Extend(ctx, idem.Owner{}, 0), "memstore", "lease")
}
