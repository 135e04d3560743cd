package amqpinbox

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
)

// TestConfigErrors: every option New rejects is reported as a
// *idem.ConfigError naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ok := func() *Config {
		return &Config{Queue: "orders", DeadLetterQueue: "orders.dead", RetryQueue: "orders.retry", MaxFailures: 5, Concurrency: 1, Prefetch: 2}
	}
	if err := ok().validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for field, mutate := range map[string]func(*Config){
		"Config.Queue":           func(c *Config) { c.Queue = "" },
		"Config.MaxFailures":     func(c *Config) { c.MaxFailures = 0 },
		"Config.Concurrency":     func(c *Config) { c.Concurrency = -1 },
		"Config.Prefetch":        func(c *Config) { c.Prefetch = 0 },
		"Config.DeadLetterQueue": func(c *Config) { c.DeadLetterQueue = c.Queue },
		"Config.RetryQueue":      func(c *Config) { c.RetryQueue = c.DeadLetterQueue },
		"Config.Consumer":        func(c *Config) { c.Consumer = strings.Repeat("c", 256) },
	} {
		c := ok()
		mutate(c)
		configtest.Want(t, c.validate(), "amqpinbox", field)
	}
	_, err := New(nil, nil, nil, nil)
	configtest.Want(t, err, "amqpinbox", "p")
}
