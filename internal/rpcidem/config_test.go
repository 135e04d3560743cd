package rpcidem

import (
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/observe"
)

// TestConfigErrors: every option NewGuard rejects is reported as a
// *idem.ConfigError of the interceptor's package (grpcidem, connectidem)
// naming its Config field.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	store := memstore.New(nil)
	defer store.Close()
	for _, p := range []struct {
		protocol observe.Protocol
		pkg      string
	}{{observe.ProtocolGRPC, "grpcidem"}, {observe.ProtocolConnect, "connectidem"}} {
		for field, g := range map[string]Guard{
			"Config.MaxResponse":        {MaxResponse: -1},
			"Config.Lease":              {Lease: time.Microsecond},
			"Config.Retention":          {Lease: time.Hour, Retention: time.Minute},
			"Config.InFlightRetryAfter": {InFlightRetryAfter: -1},
			"Config.StoreTimeout":       {StoreTimeout: -1},
		} {
			g.Store, g.Protocol = store, p.protocol
			_, err := NewGuard(g)
			configtest.Want(t, err, p.pkg, field)
		}
		_, err := NewGuard(Guard{Protocol: p.protocol})
		configtest.Want(t, err, p.pkg, "store")
	}
}
