package amqpoutbox_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/internal/configtest"
	"github.com/idemkit/idem/outbox/amqpoutbox"
)

// TestConfigErrors: a missing or malformed URL is a *idem.ConfigError for
// url, and its text never holds the URL's password.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	const secret = "Hunter2Secret"
	for _, url := range []string{
		"",
		"http://guest:" + secret + "@127.0.0.1:5672/",             // wrong scheme: shown redacted
		"amqp://guest:" + secret + "@127.0.0.1:5672/?heartbeat=x", // bad parameter: shown redacted
		"amqp://guest:" + secret + "@[::1:5672/",                  // not a URL at all: not shown
		"amqp://guest:" + secret + " @127.0.0.1:5672/",            // white space
	} {
		_, err := amqpoutbox.New(url, nil)
		configtest.Want(t, err, "amqpoutbox", "url")
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("New(%q): the error shows the password: %v", url, err)
		}
	}
	if _, err := amqpoutbox.New("amqp://guest:guest@127.0.0.1:5672/", nil); err != nil {
		t.Errorf("valid URL: %v", err)
	}
}
