package idemclient_test

import (
	"testing"

	"github.com/idemkit/idem/idemclient"
	"github.com/idemkit/idem/internal/configtest"
)

// TestConfigErrors: every option New and NewBudget reject is reported as a
// *idem.ConfigError of package idemclient naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]*idemclient.Config{
		"Config.MaxAttempts":     {MaxAttempts: -1},
		"Config.MaxElapsed":      {MaxElapsed: -1},
		"Config.BaseDelay":       {BaseDelay: -1},
		"Config.MaxDelay":        {MaxDelay: -1},
		"Config.MaxRetryAfter":   {MaxRetryAfter: -1},
		"Config.MaxBufferedBody": {MaxBufferedBody: -1},
		"Config.Spelling":        {Spelling: 9},
		"Config.Header":          {Header: "bad header"},
	} {
		_, err := idemclient.New(cfg)
		configtest.Want(t, err, "idemclient", field)
	}
	_, err := idemclient.NewBudget(-0.1, 10)
	configtest.Want(t, err, "idemclient", "ratio")
	_, err = idemclient.NewBudget(0.1, 0.5)
	configtest.Want(t, err, "idemclient", "capacity")
}
