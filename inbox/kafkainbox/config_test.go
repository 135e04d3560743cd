package kafkainbox

import (
	"testing"

	"github.com/idemkit/idem/internal/configtest"
)

// TestConfigErrors: every option New rejects is reported as a
// *idem.ConfigError naming it.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ok := func() *Config {
		return &Config{Brokers: []string{"127.0.0.1:9092"}, Group: "billing", Topics: []string{"orders"}, MaxFailures: 5, MaxPollRecords: 10}
	}
	if err := ok().validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	for field, mutate := range map[string]func(*Config){
		"Config.Brokers":         func(c *Config) { c.Brokers = nil },
		"Config.Group":           func(c *Config) { c.Group = "" },
		"Config.Topics":          func(c *Config) { c.Topics = nil },
		"Config.MaxFailures":     func(c *Config) { c.MaxFailures = 0 },
		"Config.MaxPollRecords":  func(c *Config) { c.MaxPollRecords = -1 },
		"Config.DeadLetterTopic": func(c *Config) { c.DeadLetterTopic = "orders" },
	} {
		c := ok()
		mutate(c)
		configtest.Want(t, c.validate(), "kafkainbox", field)
	}
	_, err := New(nil, nil, nil)
	configtest.Want(t, err, "kafkainbox", "p")
}
