package natsinbox

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
)

// TestConfigErrors: every option New rejects is reported as a
// *idem.ConfigError naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ok := func() *Config { return &Config{Consumer: "ORDERS/billing", MaxFailures: 5, Concurrency: 1} }
	if err := ok().validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for field, mutate := range map[string]func(*Config){
		"Config.Consumer":          func(c *Config) { c.Consumer = "" },
		"Config.MaxFailures":       func(c *Config) { c.MaxFailures = 0 },
		"Config.Concurrency":       func(c *Config) { c.Concurrency = -1 },
		"Config.DeadLetterSubject": func(c *Config) { c.DeadLetterSubject = "dead" }, // without JetStream
	} {
		c := ok()
		mutate(c)
		configtest.Want(t, c.validate(), "natsinbox", field)
	}
	c := ok()
	c.Consumer = strings.Repeat("c", 256)
	configtest.Want(t, c.validate(), "natsinbox", "Config.Consumer")
	_, err := New(nil, nil, nil, nil)
	configtest.Want(t, err, "natsinbox", "p")
}
