package tiered_test

import (
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/memstore"
	"github.com/idemkit/idem/tiered"
)

// TestConfigErrors: every option New rejects is reported as a
// *idem.ConfigError of package tiered naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	fast, durable := memstore.New(nil), memstore.New(nil)
	defer fast.Close()
	defer durable.Close()
	for field, cfg := range map[string]*tiered.Config{
		"Config.FastTimeout": {FastTimeout: -time.Second},
		"Config.LogInterval": {LogInterval: -time.Second},
	} {
		_, err := tiered.New(fast, durable, cfg)
		configtest.Want(t, err, "tiered", field)
	}
	_, err := tiered.New(nil, durable, nil)
	configtest.Want(t, err, "tiered", "fast")
	_, err = tiered.New(fast, nil, nil)
	configtest.Want(t, err, "tiered", "durable")
}
