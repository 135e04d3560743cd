package pglock

import (
	"context"
	"testing"
	"time"

	"github.com/idemkit/idem/internal/configtest"
)

// TestConfigErrors: every option New rejects, and AcquireTx's nil Tx, are
// reported as a *idem.ConfigError of package pglock naming them.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]*Config{
		"Config.CheckInterval": {CheckInterval: time.Millisecond},
		"Config.WaitTimeout":   {WaitTimeout: -time.Second},
		"Config.FenceSequence": {FenceSequence: "seq; DROP TABLE x"},
	} {
		c := cfg.withDefaults()
		configtest.Want(t, c.validate(), "pglock", field)
	}
	if c := (*Config)(nil).withDefaults(); c.validate() != nil {
		t.Errorf("defaults: %v", c.validate())
	}
	_, err := New(nil, nil)
	configtest.Want(t, err, "pglock", "db")
	l := &Locker{}
	_, err = l.AcquireTx(context.Background(), nil, "n")
	configtest.Want(t, err, "pglock", "tx")
	_, err = l.TryAcquireTx(context.Background(), nil, "n")
	configtest.Want(t, err, "pglock", "tx")
}
